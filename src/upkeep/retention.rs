//! The `retention` job: deletes submissions older than a number of days that no
//! delivery still needs (no delivery, or delivered), in batches; those in the spam folder
//! after their own, usually shorter, number of days. An endpoint's own days (its
//! `retentionDays`, `spamRetentionDays`) replace the server's for its submissions. Deliveries and attempt histories
//! stay, without the submission (attempts go by their own retention, whole partitions at a
//! time: history.rs). Their uploaded files are removed right after, bytes and
//! all (the delete detaches them; `Files::sweep` removes what is detached).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::db::{self, Db, DbError};

pub use crate::db::submissions::Retention;

/// Deletes (or with `dry_run` only counts) the expired submissions, a batch per call;
/// returns how many.
pub async fn apply(
    db: &Db,
    retention: Retention,
    batch_size: u32,
    dry_run: bool,
) -> Result<u64, DbError> {
    if dry_run {
        let count = db
            .run(async |conn| db::submissions::count_expired(conn, retention).await)
            .await?;
        return Ok(u64::try_from(count).unwrap_or(0));
    }
    let batch = i64::from(batch_size.max(1));
    let mut deleted = 0u64;
    loop {
        let removed = db
            .run(async |conn| db::submissions::delete_expired_batch(conn, retention, batch).await)
            .await?;
        deleted += removed as u64;
        if removed == 0 {
            return Ok(deleted);
        }
    }
}

/// The most days retention keeps anything for (the server's settings' cap and an
/// endpoint's): further back than this, dates leave what PostgreSQL stores.
const MAX_DAYS: u32 = 1_000_000;

/// Retention at `now` with the server's `days` (inbox) and `spam_days` (spam folder), each
/// 0 for kept; `None` when one is over 1,000,000 days (the configuration's cap rules that
/// out; the command line's arguments do not).
pub fn retention(now: DateTime<Utc>, days: u32, spam_days: u32) -> Option<Retention> {
    let days_of = |days: u32| {
        (days <= MAX_DAYS)
            .then(|| i32::try_from(days).ok())
            .flatten()
    };
    Some(Retention {
        now,
        days: days_of(days)?,
        spam_days: days_of(spam_days)?,
    })
}

/// One pass of the `retention` job: `days` for the inbox and `spam_days` for the spam folder
/// (0: kept), then the erased submissions' files.
pub async fn run(
    db: Db,
    files: Arc<crate::files::Files>,
    now: DateTime<Utc>,
    days: u32,
    spam_days: u32,
) {
    let Some(retention) = retention(now, days, spam_days) else {
        tracing::error!(
            days,
            spam_days,
            "the retention cutoff is out of range; retention skipped"
        );
        return;
    };
    match apply(&db, retention, 1000, false).await {
        Ok(deleted) => {
            tracing::info!(deleted, days, spam_days, "retention applied");
            // The erased submissions' files: their rows were detached by the delete.
            files.sweep_logged().await;
        }
        Err(error) => {
            tracing::warn!(error = %error.summary(), "retention failed; it runs again later")
        }
    }
}
