//! The process's periodic upkeep: every job in one table ([`start`]), each job's body in a
//! module of its own, all run by one mechanism ([`every`]).
//!
//! | job | first run | then every | runs in | when several processes run it |
//! | --- | --- | --- | --- | --- |
//! | `history` (partitions ahead, events and attempts past retention: history.rs) | at start | hour | workers | idempotent: each makes what is missing, drops what is past |
//! | `forget` (autoresponder recipients, captcha tokens, spent form stamps, audit entries past `FORMS_AUDIT_RETENTION_DAYS`: forget.rs) | at start | hour | workers | idempotent batches |
//! | `file_sweep` (uploads no submission holds: files/) | at start | hour | workers | idempotent |
//! | `retention` (submissions past their days: retention.rs) | 1 min | hour | every process with retention set | idempotent batches |
//! | `rate_limit_sweep` (expired counters: rate_limits.rs) | one period | the longest window, 10–300 s | API | idempotent |
//! | `alerts` (operator alerts owed: delivery/alerts.rs) | 1 s | 1 s | workers | each alert under a 120 s lease |
//! | `alerts_cleanup` (finished alerts past 7 days: delivery/alerts.rs) | 1 s | hour | workers | idempotent |
//! | `replica_lag` (where reads go: replica.rs) | at start | 1 s | API with a read replica | per process |
//! | `key_revocations` (revoked keys' subscriptions: auth.rs) | 1 s | 1 s | API | per process |
//!
//! A job that has begun runs to its end (each is a few short statements); a job that fails
//! says so itself and waits for its next turn. Jobs are not services: the LISTEN
//! connection, the event reader, the workers and intake's writers run for the process's
//! life (services.rs).

pub mod forget;
pub mod history;
mod rate_limits;
pub mod retention;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::app::AppState;
use crate::delivery::alerts::AlertSender;

const HOUR: Duration = Duration::from_secs(3600);
const SECOND: Duration = Duration::from_secs(1);

/// One turn of a job. A closure that makes a future is one; a job with state between its
/// turns (the replica's monitor) implements it on its state.
pub trait Job: Send + 'static {
    fn turn(&mut self) -> BoxFuture<'_, ()>;
}

impl<F, Turn> Job for F
where
    F: FnMut() -> Turn + Send + 'static,
    Turn: Future<Output = ()> + Send + 'static,
{
    fn turn(&mut self) -> BoxFuture<'_, ()> {
        self().boxed()
    }
}

impl Job for crate::replica::Monitor {
    fn turn(&mut self) -> BoxFuture<'_, ()> {
        self.measure_and_route().boxed()
    }
}

/// Which of the process's roles a job comes with.
pub struct Roles {
    /// The API's jobs: the replica's lag, key revocations.
    pub api: bool,
    /// The workers' sender of operator alerts, for the two alert jobs.
    pub alerts: Option<Arc<AlertSender>>,
    /// The workers' history, forget and file sweep jobs.
    pub history: bool,
    pub retention: bool,
    pub rate_limit_sweep: bool,
}

/// Starts every job this process runs (the table above), each in `tasks`, until `stop`.
pub fn start(app: &AppState, roles: Roles, tasks: &mut JoinSet<()>, stop: &CancellationToken) {
    let mut jobs: Vec<(&'static str, Duration, Duration, Box<dyn Job>)> = Vec::new();
    if roles.history {
        let (db, config, clock) = (app.db.clone(), app.config.clone(), app.clock.clone());
        jobs.push((
            "history",
            Duration::ZERO,
            HOUR,
            Box::new(move || {
                history::run(
                    db.clone(),
                    clock.now(),
                    config.event_retention,
                    config.attempt_retention_days,
                )
            }),
        ));
        let (db, clock) = (app.db.clone(), app.clock.clone());
        let audit_days = app.config.audit_retention_days;
        jobs.push((
            "forget",
            Duration::ZERO,
            HOUR,
            Box::new(move || forget::run(db.clone(), clock.now(), audit_days)),
        ));
        let files = app.files.clone();
        jobs.push((
            "file_sweep",
            Duration::ZERO,
            HOUR,
            Box::new(move || {
                let files = files.clone();
                async move { files.sweep_logged().await }
            }),
        ));
    }
    if let Some(alerts) = roles.alerts {
        let sender = alerts.clone();
        jobs.push((
            "alerts",
            SECOND,
            SECOND,
            Box::new(move || {
                let sender = sender.clone();
                async move { sender.send_due().await }
            }),
        ));
        jobs.push((
            "alerts_cleanup",
            SECOND,
            HOUR,
            Box::new(move || {
                let sender = alerts.clone();
                async move { sender.delete_finished().await }
            }),
        ));
    }
    if roles.retention {
        let (db, files, clock) = (app.db.clone(), app.files.clone(), app.clock.clone());
        let (days, spam_days) = (
            app.config.submission_retention_days,
            app.config.spam.spam_retention_days,
        );
        jobs.push((
            "retention",
            Duration::from_secs(60),
            HOUR,
            Box::new(move || {
                retention::run(db.clone(), files.clone(), clock.now(), days, spam_days)
            }),
        ));
    }
    if roles.rate_limit_sweep {
        let period = rate_limits::period(&app.config.rate_limit);
        let (db, limits, clock) = (
            app.db.clone(),
            app.config.rate_limit.clone(),
            app.clock.clone(),
        );
        jobs.push((
            "rate_limit_sweep",
            period,
            period,
            Box::new(move || rate_limits::sweep(db.clone(), limits.clone(), clock.now())),
        ));
    }
    if roles.api {
        if let Some(replica) = &app.replica {
            let monitor = crate::replica::Monitor::new(replica.clone(), app.db.clone());
            jobs.push(("replica_lag", Duration::ZERO, SECOND, Box::new(monitor)));
        }
        let (revocations, db) = (app.revocations.clone(), app.db.clone());
        jobs.push((
            "key_revocations",
            SECOND,
            SECOND,
            Box::new(move || {
                let (revocations, db) = (revocations.clone(), db.clone());
                async move { revocations.check(&db).await }
            }),
        ));
    }
    for (name, first, period, job) in jobs {
        let stop = stop.clone();
        tasks.spawn(async move {
            tracing::debug!(job = name, "upkeep job scheduled");
            every(first, period, &stop, job).await
        });
    }
}

/// Runs `job` after `first`, then every `period`, until `stop`: the one schedule of every
/// periodic job. A turn is awaited whole; the next waits a full period after it ends.
async fn every(first: Duration, period: Duration, stop: &CancellationToken, mut job: Box<dyn Job>) {
    let mut wait = first;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        job.turn().await;
        wait = period;
    }
}
