//! Retention (SPEC section 10): deletes submissions older than a number of days that no
//! delivery still needs (no delivery, or delivered), in batches. Deliveries and attempt
//! histories stay, without the submission.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;

use crate::app::AppState;
use crate::db::{self, DbError};

/// How often `serve` applies retention when `FORMS_SUBMISSION_RETENTION_DAYS` is set.
pub const SCHEDULE_EVERY: Duration = Duration::from_secs(3600);

pub fn cutoff(now: DateTime<Utc>, days: u32) -> DateTime<Utc> {
    now - chrono::Duration::days(i64::from(days))
}

/// Deletes (or with `dry_run` only counts) the expired submissions; returns how many.
pub async fn apply(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
    batch_size: u32,
    dry_run: bool,
) -> Result<u64, DbError> {
    if dry_run {
        return Ok(db::submissions::count_expired(conn, cutoff).await? as u64);
    }
    let mut deleted = 0u64;
    loop {
        let batch =
            db::submissions::delete_expired_batch(conn, cutoff, i64::from(batch_size.max(1)))
                .await?;
        deleted += batch as u64;
        if batch == 0 {
            return Ok(deleted);
        }
    }
}

/// Applies retention every `SCHEDULE_EVERY` until shutdown (first run a minute after start).
pub async fn run_on_schedule(app: AppState, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let days = app.config.submission_retention_days;
    let mut wait = Duration::from_secs(60);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        wait = SCHEDULE_EVERY;
        let cutoff = cutoff(app.clock.now(), days);
        let result = async {
            let mut conn = app.pool.get().await?;
            apply(&mut conn, cutoff, 1000, false).await
        }
        .await;
        match result {
            Ok(deleted) => tracing::info!(deleted, days, "retention applied"),
            Err(error) => {
                tracing::warn!(error = %error.summary(), "retention failed; it runs again later")
            }
        }
    }
}
