//! Delivery events are kept for `FORMS_EVENT_RETENTION_HOURS` (how far back a subscriber
//! may resume); older ones are deleted in batches, at start and hourly. The same hourly
//! pass forgets the autoresponders' recipients whose quiet time has passed (a row that
//! decides nothing any more: the next submission from that address would take it over),
//! the captcha tokens seen more than [`TOKEN_MEMORY`] ago (every provider refuses a
//! token that old itself), and runs the duty handed to it by its caller beside them: the
//! sweep of uploaded files no submission holds (`Files::sweep`: those of erased
//! submissions, and uploads never attached within `FORMS_FILE_SWEEP_GRACE_SECONDS`,
//! objects in S3 included). A closure rather than the files themselves, so that the feed
//! depends on nothing of theirs.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::db::events;
use crate::db::{Db, DbError};

/// Pruning runs this often, deleting this many events per statement.
const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);
const PRUNE_BATCH: i64 = 10_000;
/// How long a captcha token is remembered as seen: an hour, against the providers' few
/// minutes of validity (Turnstile five, hCaptcha and reCAPTCHA two).
pub const TOKEN_MEMORY: chrono::Duration = chrono::Duration::hours(1);

/// Deletes events older than `retention` and runs `also`, at start and hourly, until
/// `shutdown`.
pub async fn prune_on_schedule(
    db: Db,
    retention: Duration,
    clock: Arc<dyn Clock>,
    also: impl Fn() -> futures_util::future::BoxFuture<'static, ()> + Send + Sync,
    shutdown: CancellationToken,
) {
    // The configuration bounds the retention to a year: always representable.
    let retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
    let (db, clock, also) = (&db, &clock, &also);
    crate::clock::every(Duration::ZERO, PRUNE_INTERVAL, &shutdown, || async move {
        also().await;
        let now = clock.now();
        match db
            .run(async |conn| {
                crate::db::destinations::forget_quiet_recipients(conn, now, PRUNE_BATCH).await
            })
            .await
        {
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %error.summary(), "cannot forget autoresponder recipients past their quiet time")
            }
        }
        if let Some(before) = now.checked_sub_signed(TOKEN_MEMORY) {
            if let Err(error) = db
                .run(async |conn| crate::db::spam::forget_tokens(conn, before, PRUNE_BATCH).await)
                .await
            {
                tracing::warn!(error = %error.summary(), "cannot forget the captcha tokens seen long ago");
            }
        }
        match now.checked_sub_signed(retention) {
            Some(cutoff) => match prune(db, cutoff).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned delivery events past retention"),
                Err(error) => {
                    tracing::warn!(error = %error.summary(), "cannot prune delivery events")
                }
            },
            None => tracing::error!("the event retention reaches before any time; nothing pruned"),
        }
    })
    .await
}

/// Deletes every event older than `cutoff`, a batch per statement; returns how many.
pub async fn prune(db: &Db, cutoff: chrono::DateTime<chrono::Utc>) -> Result<i64, DbError> {
    let mut total = 0;
    loop {
        let pruned = db
            .run(async |conn| events::prune_before(conn, cutoff, PRUNE_BATCH).await)
            .await?;
        total += pruned;
        if pruned < PRUNE_BATCH {
            return Ok(total);
        }
    }
}
