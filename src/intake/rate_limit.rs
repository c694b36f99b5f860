//! Fixed-window rate limits shared across processes through PostgreSQL (docs/intake.md).

use chrono::{DateTime, TimeZone, Utc};

use crate::config::Secret;
use crate::digest::{hmac_sha256_hex, sha256_hex};

#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub requests: u32,
    pub window_seconds: u32,
}

/// The window containing `now`, aligned to the Unix epoch: (start, end).
pub fn window(now: DateTime<Utc>, window_seconds: u32) -> (DateTime<Utc>, DateTime<Utc>) {
    let width = i64::from(window_seconds.max(1));
    let start_seconds = now.timestamp().div_euclid(width) * width;
    let start = Utc.timestamp_opt(start_seconds, 0).single().unwrap_or(now);
    (start, start + chrono::Duration::seconds(width))
}

/// Whole seconds from `now` to the end of the window, rounded up, at least 1.
pub fn retry_after_seconds(now: DateTime<Utc>, window_end: DateTime<Utc>) -> u64 {
    let remaining_micros = (window_end - now).num_microseconds().unwrap_or(0).max(0) as u64;
    remaining_micros.div_ceil(1_000_000).max(1)
}

/// The stored subject for an address: hex SHA-256, or HMAC-SHA256 with the configured
/// secret. The raw address is never stored or logged.
pub fn address_digest(address: &str, secret: Option<&Secret>) -> String {
    match secret {
        Some(secret) => hmac_sha256_hex(secret.expose().as_bytes(), address.as_bytes()),
        None => sha256_hex(address.as_bytes()),
    }
}

/// Counters of windows that started before this may go: those that ended a whole window
/// (the longest of the two) or more ago. The extra window is for other processes whose
/// clocks run behind this one's: just after a window ends here, such a process still
/// counts in it, and deleting that counter under it would let its window count from zero
/// again (and the delete could deadlock with its batch, which would then fail).
pub(crate) fn sweep_cutoff(now: DateTime<Utc>, longest_window_seconds: u32) -> DateTime<Utc> {
    now - chrono::Duration::seconds(2 * i64::from(longest_window_seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn windows_align_to_the_epoch() {
        let (start, end) = window(at("2026-01-01T00:01:30.5Z"), 60);
        assert_eq!(start, at("2026-01-01T00:01:00Z"));
        assert_eq!(end, at("2026-01-01T00:02:00Z"));
        let (start, _) = window(at("2026-01-01T00:00:07Z"), 7);
        assert_eq!(start.timestamp() % 7, 0);
    }

    #[test]
    fn the_sweep_keeps_the_window_just_ended() {
        let now = at("2026-01-01T00:02:00.5Z");
        let cutoff = sweep_cutoff(now, 60);
        // The window that ended half a second ago: another process may still count in it.
        let (just_ended, _) = window(now - chrono::Duration::seconds(1), 60);
        assert!(just_ended >= cutoff);
        // The one before that ended a whole window ago.
        let (older, _) = window(now - chrono::Duration::seconds(61), 60);
        assert!(older < cutoff);
    }

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one() {
        let end = at("2026-01-01T00:02:00Z");
        assert_eq!(retry_after_seconds(at("2026-01-01T00:01:00Z"), end), 60);
        assert_eq!(retry_after_seconds(at("2026-01-01T00:01:00.5Z"), end), 60);
        assert_eq!(
            retry_after_seconds(at("2026-01-01T00:01:58.000001Z"), end),
            2
        );
        assert_eq!(retry_after_seconds(at("2026-01-01T00:01:59.9Z"), end), 1);
        assert_eq!(retry_after_seconds(end, end), 1);
    }

    #[test]
    fn digests() {
        assert_eq!(address_digest("127.0.0.1", None), sha256_hex(b"127.0.0.1"));
        let secret = Secret::new("0123456789abcdef");
        let keyed = address_digest("127.0.0.1", Some(&secret));
        assert_eq!(keyed.len(), 64);
        assert_ne!(keyed, address_digest("127.0.0.1", None));
    }
}
