//! The `retention` job: deletes submissions older than a number of days that no
//! delivery still needs (no delivery, or delivered), in batches; those in the spam folder
//! after their own, usually shorter, number of days. Deliveries and attempt histories
//! stay, without the submission (attempts go by their own retention, whole partitions at a
//! time: history.rs). Their uploaded files are removed right after, bytes and
//! all (the delete detaches them; `Files::sweep` removes what is detached).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::db::{self, Db, DbError};

pub use crate::db::submissions::RetentionCutoffs;

/// The cutoff `days` before `now`, or `None` when that lies before any representable time
/// (an absurd number of days).
pub fn cutoff(now: DateTime<Utc>, days: u32) -> Option<DateTime<Utc>> {
    chrono::Duration::try_days(i64::from(days)).and_then(|age| now.checked_sub_signed(age))
}

/// Deletes (or with `dry_run` only counts) the expired submissions, a batch per call;
/// returns how many.
pub async fn apply(
    db: &Db,
    cutoffs: RetentionCutoffs,
    batch_size: u32,
    dry_run: bool,
) -> Result<u64, DbError> {
    if dry_run {
        let count = db
            .run(async |conn| db::submissions::count_expired(conn, cutoffs).await)
            .await?;
        return Ok(u64::try_from(count).unwrap_or(0));
    }
    let batch = i64::from(batch_size.max(1));
    let mut deleted = 0u64;
    loop {
        let removed = db
            .run(async |conn| db::submissions::delete_expired_batch(conn, cutoffs, batch).await)
            .await?;
        deleted += removed as u64;
        if removed == 0 {
            return Ok(deleted);
        }
    }
}

/// The cutoffs of `days` (inbox) and `spam_days` (spam folder) before `now`, each `None`
/// for 0 (kept); `None` when one lies before any representable time (an absurd number of
/// days, which the configuration's caps rule out).
pub fn cutoffs(now: DateTime<Utc>, days: u32, spam_days: u32) -> Option<RetentionCutoffs> {
    let of = |days: u32| match days {
        0 => Some(None),
        days => cutoff(now, days).map(Some),
    };
    Some(RetentionCutoffs {
        inbox: of(days)?,
        spam: of(spam_days)?,
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
    let Some(cutoffs) = cutoffs(now, days, spam_days) else {
        tracing::error!(
            days,
            spam_days,
            "the retention cutoff is out of range; retention skipped"
        );
        return;
    };
    match apply(&db, cutoffs, 1000, false).await {
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
