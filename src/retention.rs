//! Retention: deletes submissions older than a number of days that no
//! delivery still needs (no delivery, or delivered), in batches. Deliveries and attempt
//! histories stay, without the submission. Their uploaded files are removed right after,
//! bytes and all (the delete detaches them; `Files::sweep` removes what is detached).

use std::time::Duration;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::db::{self, Db, DbError};

/// How often `serve` applies retention when `FORMS_SUBMISSION_RETENTION_DAYS` is set.
pub const SCHEDULE_EVERY: Duration = Duration::from_secs(3600);

/// The cutoff `days` before `now`, or `None` when that lies before any representable time
/// (an absurd number of days).
pub fn cutoff(now: DateTime<Utc>, days: u32) -> Option<DateTime<Utc>> {
    chrono::Duration::try_days(i64::from(days)).and_then(|age| now.checked_sub_signed(age))
}

/// Deletes (or with `dry_run` only counts) the expired submissions, a batch per call;
/// returns how many.
pub async fn apply(
    db: &Db,
    cutoff: DateTime<Utc>,
    batch_size: u32,
    dry_run: bool,
) -> Result<u64, DbError> {
    if dry_run {
        let count = db
            .run(async |conn| db::submissions::count_expired(conn, cutoff).await)
            .await?;
        return Ok(u64::try_from(count).unwrap_or(0));
    }
    let batch = i64::from(batch_size.max(1));
    let mut deleted = 0u64;
    loop {
        let removed = db
            .run(async |conn| db::submissions::delete_expired_batch(conn, cutoff, batch).await)
            .await?;
        deleted += removed as u64;
        if removed == 0 {
            return Ok(deleted);
        }
    }
}

/// Applies retention every `SCHEDULE_EVERY` until shutdown (first run a minute after start).
pub async fn run_on_schedule(
    db: Db,
    files: Arc<crate::files::Files>,
    days: u32,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) {
    let (db, clock, files) = (&db, &clock, &files);
    crate::clock::every(Duration::from_secs(60), SCHEDULE_EVERY, &shutdown, || async move {
        // The configuration caps the days far below an unrepresentable cutoff.
        let Some(cutoff) = cutoff(clock.now(), days) else {
            tracing::error!(
                days,
                "the retention cutoff is out of range; retention skipped"
            );
            return;
        };
        match apply(db, cutoff, 1000, false).await {
            Ok(deleted) => {
                tracing::info!(deleted, days, "retention applied");
                // The erased submissions' files: their rows were detached by the delete.
                files.sweep_logged().await;
            }
            Err(error) => {
                tracing::warn!(error = %error.summary(), "retention failed; it runs again later")
            }
        }
    })
    .await
}
