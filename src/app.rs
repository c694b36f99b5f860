//! The state every request handler and worker shares, behind one `Arc`.

use std::sync::Arc;

use crate::auth::KeyRevocations;
use crate::clock::Clock;
use crate::config::Config;
use crate::db::{ConnectionSettings, Db};
use crate::events::EventFeed;

pub struct App {
    pub config: Config,
    /// For the connections that live outside the pool (the notification listener, exports).
    pub connection: ConnectionSettings,
    pub db: Db,
    pub clock: Arc<dyn Clock>,
    /// The process's delivery event reader, shared by every subscription.
    pub events: Arc<EventFeed>,
    pub revocations: KeyRevocations,
    /// One permit per export that may stream at once (`FORMS_EXPORT_MAX_CONCURRENT`).
    pub exports: Arc<tokio::sync::Semaphore>,
}

pub type AppState = Arc<App>;

/// The tasks behind subscriptions that every serving process runs until `stopping`: the
/// one `LISTEN` connection (which also wakes the worker, when there is one), the event
/// reader and the revocation check.
pub fn spawn_live_services(
    app: &AppState,
    worker_wake: Option<Arc<tokio::sync::Notify>>,
    stopping: &tokio::sync::watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    use crate::db::listen::{
        DELIVERY_DUE as DELIVERY_DUE_CHANNEL, DELIVERY_EVENT as DELIVERY_EVENT_CHANNEL,
    };
    let feed = app.events.clone();
    tasks.spawn(crate::db::listen::run(
        app.connection.clone(),
        // A new delivery's `created` event rides on the wake-up of the workers.
        &[DELIVERY_DUE_CHANNEL, DELIVERY_EVENT_CHANNEL],
        move |notification| match notification {
            // (Re)connected: anything sent meanwhile was missed.
            None => {
                feed.notify();
                if let Some(wake) = &worker_wake {
                    wake.notify_one();
                }
            }
            Some((channel, _)) if channel == DELIVERY_EVENT_CHANNEL => feed.notify(),
            Some((channel, _)) if channel == DELIVERY_DUE_CHANNEL => {
                feed.notify();
                if let Some(wake) = &worker_wake {
                    wake.notify_one();
                }
            }
            Some(_) => {}
        },
        stopping.clone(),
    ));
    tasks.spawn(crate::events::run_feed(app.clone(), stopping.clone()));
    tasks.spawn(KeyRevocations::run(app.clone(), stopping.clone()));
}

impl App {
    pub fn new(
        config: Config,
        connection: ConnectionSettings,
        db: Db,
        clock: Arc<dyn Clock>,
    ) -> AppState {
        App::with_event_feed(config, connection, db, clock, EventFeed::new())
    }

    /// [`App::new`] with a given event feed (tests use one with a tiny buffer).
    pub fn with_event_feed(
        config: Config,
        connection: ConnectionSettings,
        db: Db,
        clock: Arc<dyn Clock>,
        events: EventFeed,
    ) -> AppState {
        Arc::new(App {
            connection,
            db,
            clock,
            events: Arc::new(events),
            revocations: KeyRevocations::default(),
            exports: Arc::new(tokio::sync::Semaphore::new(config.export_max_concurrent)),
            config,
        })
    }
}
