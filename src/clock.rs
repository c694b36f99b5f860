//! The time source. Production reads the system clock; tests substitute a clock they move
//! by hand, so schedules and rate-limit windows can be tested without waiting.

use chrono::{DateTime, Utc};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;

    /// The time statements that decide by time (due times, leases, completions) are told
    /// to use. `None` lets the database's clock decide, which every process shares, so
    /// processes whose clocks disagree still agree on which lease has run out. A test
    /// clock pins it.
    fn pinned(&self) -> Option<DateTime<Utc>> {
        None
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        // PostgreSQL keeps microseconds; truncating here makes what we answer equal to
        // what we store.
        truncate_to_micros(Utc::now())
    }
}

/// A clock that only moves when told to (tests).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug)]
pub struct ManualClock(std::sync::Mutex<DateTime<Utc>>);

#[cfg(any(test, feature = "testing"))]
impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(std::sync::Mutex::new(truncate_to_micros(start)))
    }

    pub fn advance(&self, by: chrono::Duration) {
        let mut now = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = truncate_to_micros(to);
    }
}

#[cfg(any(test, feature = "testing"))]
impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn pinned(&self) -> Option<DateTime<Utc>> {
        Some(self.now())
    }
}

pub fn truncate_to_micros(time: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::{SubsecRound, Timelike};
    let micros = time.nanosecond() / 1_000 * 1_000;
    time.with_nanosecond(micros)
        .unwrap_or_else(|| time.trunc_subsecs(6))
}

/// Whether exclusive bounds `(after, before)` leave no microsecond between them (an empty
/// or inverted range); the one rule behind every `invalid_time_range`.
pub fn is_empty_range(after: Option<DateTime<Utc>>, before: Option<DateTime<Utc>>) -> bool {
    match (after, before) {
        (Some(after), Some(before)) => before <= after + chrono::Duration::microseconds(1),
        _ => false,
    }
}

/// RFC 3339 with exactly six fractional digits and `Z`, the format of every timestamp the service shows.
pub fn format_timestamp(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_six_digits_and_z() {
        let time = DateTime::parse_from_rfc3339("2026-08-24T14:34:27.651841789Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            format_timestamp(truncate_to_micros(time)),
            "2026-08-24T14:34:27.651841Z"
        );
        let whole = DateTime::parse_from_rfc3339("2026-08-24T14:34:27Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(format_timestamp(whole), "2026-08-24T14:34:27.000000Z");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = Utc::now();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), truncate_to_micros(start));
        clock.advance(chrono::Duration::seconds(10));
        assert_eq!(
            clock.now(),
            truncate_to_micros(start) + chrono::Duration::seconds(10)
        );
    }
}
