//! The process's services, started in one place, each by its flag, and stopped by one
//! cancellation token.
//!
//! | service | runs when | needs |
//! | --- | --- | --- |
//! | HTTP server (intake, GraphQL, export, health, metrics) | a listener is given (`FORMS_API_ENABLED`) | the app state |
//! | metrics server (`/metrics` alone) | a listener is given (`FORMS_METRICS_BIND`) | the app state |
//! | delivery workers | senders are given (`FORMS_WORKER_ENABLED`) | pool, clock, worker and webhook settings, the webhook client and the mailer |
//! | notification listener (the one `LISTEN` connection) | always | connection settings, the feed, the workers' wake-up |
//! | event reader | with the API | pool, the feed |
//! | intake's writers (group commit) | with the API | pool, clock, the workers' hand-off |
//! | upkeep: the periodic jobs (upkeep/mod.rs has their table) | by role: workers, API, retention set | pool, clock, files, the alert sender |
//!
//! Cancelling the token stops them all: the HTTP server stops accepting and drains within
//! its deadline, the workers stop claiming and record what is in flight, the event reader
//! closes open subscriptions; [`Services::wait`] returns when every one has ended.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::app::AppState;
use crate::db::listen::{self, AUDIT_ENTRY, DELIVERY_DUE, DELIVERY_EVENT, ENDPOINT_CHANGED};
use crate::delivery::alerts::AlertSender;
use crate::delivery::Senders;
use crate::delivery::Worker;
use crate::http::server::Limits;

/// Which services a process runs.
pub struct Plan {
    /// Serve the API on this listener, within these limits.
    pub http: Option<(TcpListener, Limits)>,
    /// Serve `/metrics` on a listener of its own (`FORMS_METRICS_BIND`).
    pub metrics: Option<(TcpListener, Limits)>,
    /// Run the delivery workers with these senders.
    pub workers: Option<Senders>,
    /// Sweep expired rate-limit counters.
    pub sweeper: bool,
    /// Apply submission retention hourly.
    pub retention: bool,
    /// Prune delivery events past their retention.
    pub pruning: bool,
}

pub struct Services {
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

impl Services {
    /// Starts every service of `plan`.
    pub fn start(app: &AppState, plan: Plan) -> Services {
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let api = plan.http.is_some();
        let worker_wake = plan.workers.as_ref().map(|_| Arc::new(Notify::new()));
        // With the API and the worker in one process, intake claims for the worker and
        // marks the wake-ups only other processes' workers need (delivery/handoff.rs).
        let wake_mark: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        let own_mark = wake_mark.clone();

        // The one LISTEN connection: wakes the workers, the event reader and the endpoint
        // subscriptions, and keeps intake's endpoint cache current.
        let feed = app.events.clone();
        let wake = worker_wake.clone();
        let endpoints = app.intake.endpoints.clone();
        let audit = app.audit.clone();
        tasks.spawn(listen::run(
            app.connection.clone(),
            &[DELIVERY_DUE, DELIVERY_EVENT, ENDPOINT_CHANGED, AUDIT_ENTRY],
            move |notification| {
                let due = match notification {
                    // (Re)connected: anything sent meanwhile was missed.
                    None => {
                        endpoints.clear();
                        feed.notify_endpoint_changed();
                        true
                    }
                    Some((ENDPOINT_CHANGED, id)) => {
                        endpoints.invalidate(id);
                        feed.notify_endpoint_changed();
                        return;
                    }
                    Some((AUDIT_ENTRY, id)) => {
                        if let Ok(id) = id.parse() {
                            audit.committed(id);
                        }
                        return;
                    }
                    Some((channel, payload)) => channel == DELIVERY_DUE && payload != &*own_mark,
                };
                // A new delivery's `created` event rides on the workers' wake-up.
                feed.notify();
                if let (true, Some(wake)) = (due, &wake) {
                    wake.notify_one();
                }
            },
            stop.clone(),
        ));
        if api {
            tasks.spawn(crate::feed::run_feed(
                app.db.clone(),
                app.events.clone(),
                stop.clone(),
            ));
        }
        // With the API and the worker in one process, intake claims new deliveries for
        // the worker when it has nothing else to do (delivery/handoff.rs).
        let mut handoff = None;
        let mut alerts = None;
        if let (Some(senders), Some(wake)) = (plan.workers, worker_wake) {
            alerts = Some(Arc::new(AlertSender::new(
                app.db.clone(),
                app.config.alerts.clone(),
                senders.mail.clone(),
                senders.webhook.clone(),
                app.clock.clone(),
            )));
            let worker = Worker::new(
                app.db.clone(),
                app.clock.clone(),
                app.files.clone(),
                &app.config,
                senders,
                wake,
            );
            let handed = api.then(|| {
                let (intake_side, handed) = worker.handoff(stop.clone(), wake_mark);
                handoff = Some(intake_side);
                handed
            });
            tasks.spawn(worker.run(stop.clone(), handed));
        }
        crate::upkeep::start(
            app,
            crate::upkeep::Roles {
                api,
                alerts,
                history: plan.pruning,
                retention: plan.retention,
                rate_limit_sweep: plan.sweeper,
            },
            &mut tasks,
            &stop,
        );
        // The API's listener and, when asked for, the metrics' own: one server each.
        let servers = [
            (
                plan.http,
                crate::router::router as fn(AppState) -> axum::Router,
            ),
            (plan.metrics, crate::router::metrics_router),
        ];
        // Intake's writers outlive the stop: they finish what the API's last requests
        // queued, once its server has answered them.
        let api_drained = CancellationToken::new();
        if api {
            for writer in app.intake.committer.writers(
                app.db.clone(),
                app.clock.clone(),
                api_drained.clone(),
                handoff,
            ) {
                tasks.spawn(writer);
            }
        }
        for (index, (listener, make_router)) in servers.into_iter().enumerate() {
            if let Some((listener, limits)) = listener {
                let stopped = stop.clone().cancelled_owned();
                let router = make_router(app.clone());
                let server = crate::http::server::serve(listener, router, limits, stopped);
                let drained = (index == 0).then(|| api_drained.clone());
                tasks.spawn(async move {
                    server.await;
                    if let Some(drained) = drained {
                        drained.cancel();
                    }
                });
            }
        }
        Services { stop, tasks }
    }

    /// The token that stops every service.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Waits until every service has ended (after the token is cancelled).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}
