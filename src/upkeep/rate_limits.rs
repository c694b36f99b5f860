//! The `rate_limit_sweep` job: deletes expired rate-limit counters now and then, so the
//! table stays the size of the live windows (intake/rate_limit.rs says which may go).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::RateLimitConfig;
use crate::db::{self, Db};
use crate::intake::rate_limit::sweep_cutoff;

/// The longest of the two windows, within 10 s and 5 minutes.
pub fn period(limits: &RateLimitConfig) -> Duration {
    Duration::from_secs(u64::from(longest_window(limits)).clamp(10, 300))
}

fn longest_window(limits: &RateLimitConfig) -> u32 {
    limits.ip_window_seconds.max(limits.endpoint_window_seconds)
}

pub async fn sweep(db: Db, limits: RateLimitConfig, now: DateTime<Utc>) {
    let cutoff = sweep_cutoff(now, longest_window(&limits));
    match db
        .run(async |conn| db::rate_limits::sweep(conn, cutoff).await)
        .await
    {
        Ok(0) => {}
        Ok(deleted) => tracing::debug!(deleted, "swept expired rate-limit counters"),
        Err(error) => {
            tracing::warn!(error = %error.summary(), "could not sweep rate-limit counters")
        }
    }
}
