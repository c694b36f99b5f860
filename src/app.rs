//! The state the request handlers share, behind one `Arc`. Services started beside the
//! HTTP server (`services.rs`) are handed the parts they need, not this.

use std::sync::Arc;

use crate::audit::AuditTrail;
use crate::auth::KeyRevocations;
use crate::clock::Clock;
use crate::config::Config;
use crate::db::{ConnectionSettings, Db};
use crate::feed::EventFeed;
use crate::files::{Files, FilesState};
use crate::http::BodyBudget;
use crate::intake::committer::Committer;
use crate::intake::endpoint_cache::EndpointCache;
use crate::intake::screening::Screening;
use crate::intake::{Intake, IntakeState};
use crate::replica::Replica;
use crate::telemetry::meters::ReplicaRead;
use axum::extract::FromRef;

pub struct App {
    pub config: Config,
    /// For the connections that live outside the pool (the notification listener, exports).
    pub connection: ConnectionSettings,
    pub db: Db,
    /// The same pool, of which GraphQL operations may hold at most
    /// `FORMS_GRAPHQL_DATABASE_CONNECTIONS` connections at once: the rest is kept for
    /// intake and the workers.
    pub graphql_db: Db,
    /// The read replica (`FORMS_DATABASE_READ_URL`), if any: reads that may trail the
    /// primary go to it through [`App::graphql_query_db`] and [`App::export_connection`]
    /// while its monitor allows.
    pub replica: Option<Arc<Replica>>,
    pub clock: Arc<dyn Clock>,
    /// The process's delivery event reader, shared by every subscription.
    pub events: Arc<EventFeed>,
    /// Long-lived sessions (subscriptions) that end when their key is revoked.
    pub revocations: Arc<KeyRevocations>,
    /// One permit per GraphQL query or mutation over HTTP in progress at once
    /// (`FORMS_GRAPHQL_CONCURRENT_OPERATIONS`): parsing and validating documents is CPU
    /// work, and this bounds how much of the machine it may take.
    pub graphql_operations: Arc<tokio::sync::Semaphore>,
    /// One permit per export that may stream at once (`FORMS_EXPORT_MAX_CONCURRENT`).
    pub exports: Arc<tokio::sync::Semaphore>,
    /// The request bodies held at once, all requests together.
    pub body_budget: BodyBudget,
    /// Intake's part: its endpoint cache and group commit, and what it shares with the rest.
    pub intake: IntakeState,
    /// Uploaded files: their storage, links and sweeper.
    pub files: Arc<Files>,
    /// The audit trail's address key and its committed entries, for subscriptions.
    pub audit: Arc<AuditTrail>,
}

pub type AppState = Arc<App>;

/// Intake's handlers take their part of the state only.
impl FromRef<AppState> for IntakeState {
    fn from_ref(app: &AppState) -> IntakeState {
        app.intake.clone()
    }
}

/// The file routes take the files only.
impl FromRef<AppState> for FilesState {
    fn from_ref(app: &AppState) -> FilesState {
        FilesState(app.files.clone())
    }
}

impl App {
    #[cfg(feature = "testing")]
    pub fn new(
        config: Config,
        connection: ConnectionSettings,
        db: Db,
        clock: Arc<dyn Clock>,
    ) -> AppState {
        App::with_event_feed(config, connection, db, clock, EventFeed::new())
    }

    /// [`App::new`] with a read replica.
    pub fn with_replica(
        config: Config,
        connection: ConnectionSettings,
        db: Db,
        replica: Option<Replica>,
        clock: Arc<dyn Clock>,
    ) -> AppState {
        App::build(config, connection, db, replica, clock, EventFeed::new())
    }

    /// [`App::new`] with a given event feed (tests use one with a tiny buffer).
    #[cfg(feature = "testing")]
    pub fn with_event_feed(
        config: Config,
        connection: ConnectionSettings,
        db: Db,
        clock: Arc<dyn Clock>,
        events: EventFeed,
    ) -> AppState {
        App::build(config, connection, db, None, clock, events)
    }

    fn build(
        config: Config,
        connection: ConnectionSettings,
        db: Db,
        replica: Option<Replica>,
        clock: Arc<dyn Clock>,
        mut events: EventFeed,
    ) -> AppState {
        let replica = replica.map(Arc::new);
        if let Some(replica) = &replica {
            events.catch_up_on(replica.clone());
        }
        // Before anything is counted.
        crate::telemetry::meters::install();
        let body_budget = BodyBudget::new(config.http.max_buffered_body_bytes);
        let files = Arc::new(Files::new(config.files.clone(), db.clone(), clock.clone()));
        let intake = IntakeState(Arc::new(Intake {
            files: files.clone(),
            config: config.clone(),
            db: db.clone(),
            clock: clock.clone(),
            endpoints: Arc::new(EndpointCache::new(config.intake.endpoint_cache_max_age)),
            committer: Committer::default(),
            body_budget: body_budget.clone(),
            screening: Screening::new(config.spam.clone(), db.clone()),
        }));
        Arc::new(App {
            audit: Arc::new(AuditTrail::new(db.clone())),
            connection,
            graphql_db: db.share(config.graphql.database_connections),
            db,
            replica,
            clock,
            events: Arc::new(events),
            revocations: Arc::new(KeyRevocations::default()),
            exports: Arc::new(tokio::sync::Semaphore::new(config.export_max_concurrent)),
            graphql_operations: Arc::new(tokio::sync::Semaphore::new(
                config.graphql.concurrent_operations,
            )),
            body_budget,
            intake,
            files,
            config,
        })
    }
}

/// The one choice of where a read that may trail the primary goes (docs/operations.md,
/// "Read replicas"); everything else uses the primary's `db`, `graphql_db`, `connection`.
impl App {
    /// The replica, when there is one and its monitor lets reads go to it now.
    fn serving_replica(&self, read: ReplicaRead) -> Option<&Replica> {
        self.replica
            .as_deref()
            .filter(|replica| replica.serves(read))
    }

    /// The database of one GraphQL query operation (not a mutation, whose answer must show
    /// its own write, nor a subscription): the replica's pool, or GraphQL's share of the
    /// primary's.
    pub fn graphql_query_db(&self) -> Db {
        match self.serving_replica(ReplicaRead::Graphql) {
            Some(replica) => replica.db.clone(),
            None => self.graphql_db.clone(),
        }
    }

    /// How an export opens its connection: to the replica, or to the primary.
    pub fn export_connection(&self) -> &ConnectionSettings {
        match self.serving_replica(ReplicaRead::Export) {
            Some(replica) => &replica.connection,
            None => &self.connection,
        }
    }
}
