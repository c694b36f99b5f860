//! The verdicts of intake's rate limits: a request counted against its limits is judged
//! by the counts of its batch, and counters known to be over their limits are remembered
//! until their windows end, so that a batch holding one is counted on its own at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};

use super::{IntakeRequest, Work};
use crate::db::rate_limits::{CountedRequest, Counter, Counts};
use crate::db::{self, DbError};
use crate::error::ApiError;
use crate::intake::rate_limit::{retry_after_seconds, window, Limit};
use crate::model::rate_limit::RateLimitScope;
use crate::telemetry::meters::{self, IntakeStatement};

/// The scope of [`IntakeRequest::source`]'s limit, and of [`EndpointStage::counted`]'s.
pub(super) const SOURCE: RateLimitScope = RateLimitScope::Ip;
pub(super) const ENDPOINT: RateLimitScope = RateLimitScope::Endpoint;

/// A request counted against one rate limit (its scope is where it sits in [`IntakeRequest`]).
pub struct Counted {
    pub subject: String,
    pub limit: Limit,
    pub now: DateTime<Utc>,
}

impl Counted {
    pub(super) fn counter(&self) -> Counter<'_> {
        Counter {
            subject: &self.subject,
            window_start: window(self.now, self.limit.window_seconds).0,
        }
    }

    /// The refusal when the count including this request is over the limit.
    pub(super) fn judge(&self, scope: RateLimitScope, count: i64) -> Result<(), ApiError> {
        if count <= i64::from(self.limit.requests) {
            return Ok(());
        }
        let (_, end) = window(self.now, self.limit.window_seconds);
        Err(ApiError::RateLimitExceeded {
            scope,
            limit: self.limit.requests,
            window_seconds: self.limit.window_seconds,
            retry_after_seconds: retry_after_seconds(self.now, end),
        })
    }
}

impl Counted {
    /// Counts one request on its per-source counter alone, outside any batch, and judges
    /// it: what `GET /f/{endpoint_id}/stamp` costs (docs/intake.md, "Rate limiting").
    pub async fn count_source_alone(&self, pool: &db::Db) -> Result<(), ApiError> {
        let requests = [CountedRequest {
            source: Some((self.counter(), self.limit.requests)),
            endpoint: None,
        }];
        let limiters = (SOURCE.as_str(), ENDPOINT.as_str());
        let counts = pool
            .run(async |conn| db::rate_limits::count_attempts(conn, &requests, limiters).await)
            .await?;
        let count = counts
            .first()
            .and_then(|counts| counts.source)
            .ok_or_else(|| missing_count("per-source"))?;
        self.judge(SOURCE, count)
    }
}

/// Counts the batch's requests against their limits in one statement; one `Counts` per
/// request (nothing counted, and no statement, when rate limiting is off).
pub(super) async fn count(
    conn: &mut diesel_async::AsyncPgConnection,
    requests: &[IntakeRequest],
) -> Result<Vec<Counts>, DbError> {
    if !requests.iter().any(IntakeRequest::counts) {
        let nothing = Counts {
            source: None,
            endpoint: None,
        };
        return Ok(vec![nothing; requests.len()]);
    }
    let requests: Vec<CountedRequest<'_>> = requests
        .iter()
        .map(|request| CountedRequest {
            source: request
                .source
                .as_ref()
                .map(|counted| (counted.counter(), counted.limit.requests)),
            endpoint: request.endpoint_counted().map(Counted::counter),
        })
        .collect();
    let limiters = (SOURCE.as_str(), ENDPOINT.as_str());
    meters::intake_statement(
        IntakeStatement::Count,
        db::rate_limits::count_attempts(conn, &requests, limiters),
    )
    .await
}

/// An request's answer from its counts, in the order of the checks: the per-source
/// limit, the endpoint (steps 3–4), the per-endpoint limit, then the rest.
pub(super) fn judge(request: IntakeRequest, counts: Counts) -> Result<Work, ApiError> {
    if let Some(counted) = &request.source {
        let count = counts.source.ok_or_else(|| missing_count("per-source"))?;
        counted.judge(SOURCE, count)?;
    }
    let stage = request.endpoint?;
    if let Some(counted) = &stage.counted {
        let count = counts
            .endpoint
            .ok_or_else(|| missing_count("per-endpoint"))?;
        counted.judge(ENDPOINT, count)?;
    }
    stage.outcome
}

/// A counter the statement should have answered and did not: a broken statement.
fn missing_count(scope: &str) -> ApiError {
    ApiError::Internal(format!("a request's {scope} count is missing"))
}

/// Rate-limit counters this process found over their limit, by scope and window start,
/// with the window's end. A batch counted on one of them is counted on its own before it
/// is written: written and counted by one statement it would only roll back. A counter
/// never goes down within its window, so what is here stays true until the window ends;
/// what is not here is simply tried.
#[derive(Default)]
pub(super) struct OverLimit(Mutex<HashMap<(RateLimitScope, DateTime<Utc>), OverInWindow>>);

struct OverInWindow {
    ends: DateTime<Utc>,
    subjects: HashSet<String>,
}

/// At most this many counters are remembered (past it, the windows that ended are
/// dropped, and when none has, a new one is not remembered: its batches are tried).
const OVER_LIMIT_REMEMBERED: usize = 10_000;

impl OverLimit {
    fn known(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(RateLimitScope, DateTime<Utc>), OverInWindow>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a counter of any of `requests` is known to be over its limit.
    pub(super) fn holds_any(&self, requests: &[IntakeRequest]) -> bool {
        let known = self.known();
        if known.is_empty() {
            return false;
        }
        requests.iter().any(|request| {
            [SOURCE, ENDPOINT]
                .into_iter()
                .zip(request.counters())
                .any(|(scope, counter)| {
                    counter.is_some_and(|(counter, _)| {
                        known
                            .get(&(scope, counter.window_start))
                            .is_some_and(|window| window.subjects.contains(counter.subject))
                    })
                })
        })
    }

    /// Remembers the counters that `counts` found over their limits.
    pub(super) fn note(&self, requests: &[IntakeRequest], counts: &[Counts]) {
        let mut over = Vec::new();
        for (request, counts) in requests.iter().zip(counts) {
            for (scope, counted, count) in [
                (SOURCE, request.source.as_ref(), counts.source),
                (ENDPOINT, request.endpoint_counted(), counts.endpoint),
            ] {
                if let (Some(counted), Some(count)) = (counted, count) {
                    if counted.judge(scope, count).is_err() {
                        over.push((scope, counted));
                    }
                }
            }
        }
        if over.is_empty() {
            return;
        }
        let mut known = self.known();
        for (scope, counted) in over {
            let (start, ends) = window(counted.now, counted.limit.window_seconds);
            let remembered = |known: &HashMap<_, OverInWindow>| -> usize {
                known.values().map(|window| window.subjects.len()).sum()
            };
            if remembered(&known) >= OVER_LIMIT_REMEMBERED {
                known.retain(|_, window| window.ends > counted.now);
                if remembered(&known) >= OVER_LIMIT_REMEMBERED {
                    return;
                }
            }
            known
                .entry((scope, start))
                .or_insert_with(|| OverInWindow {
                    ends,
                    subjects: HashSet::new(),
                })
                .subjects
                .insert(counted.subject.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::intake::rate_limit::Limit;

    fn from_source(subject: &str, now: DateTime<Utc>) -> IntakeRequest {
        IntakeRequest {
            source: Some(Counted {
                subject: subject.into(),
                limit: Limit {
                    requests: 3,
                    window_seconds: 60,
                },
                now,
            }),
            endpoint: Err(ApiError::EndpointNotFound {
                endpoint_id: "gone".into(),
            }),
        }
    }

    /// A counter found over its limit is remembered for its own window and subject only,
    /// and only when it is over.
    #[test]
    fn over_limit_remembers_a_counter_over_its_limit_until_its_window_ends() {
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 30).unwrap();
        let next_window = now + chrono::Duration::seconds(60);
        let over_limit = OverLimit::default();
        let requests = [from_source("a", now), from_source("b", now)];
        let within = |source| Counts {
            source: Some(source),
            endpoint: None,
        };
        over_limit.note(&requests, &[within(3), within(3)]);
        assert!(!over_limit.holds_any(&requests));

        over_limit.note(&requests, &[within(4), within(1)]);
        assert!(over_limit.holds_any(&[from_source("a", now)]));
        assert!(over_limit.holds_any(&[from_source("b", now), from_source("a", now)]));
        assert!(!over_limit.holds_any(&[from_source("b", now)]));
        assert!(!over_limit.holds_any(&[from_source("a", next_window)]));
    }

    /// Past its bound it forgets the windows that ended, and remembers nothing new while
    /// none has.
    #[test]
    fn over_limit_stays_within_its_bound() {
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 30).unwrap();
        let over_limit = OverLimit::default();
        let over = Counts {
            source: Some(4),
            endpoint: None,
        };
        let subjects: Vec<String> = (0..OVER_LIMIT_REMEMBERED + 1)
            .map(|n| format!("s{n}"))
            .collect();
        for subject in &subjects {
            over_limit.note(&[from_source(subject, now)], &[over]);
        }
        assert!(over_limit.holds_any(&[from_source("s0", now)]));
        assert!(!over_limit.holds_any(&[from_source(&subjects[OVER_LIMIT_REMEMBERED], now)]));
        // A minute on, the full window has ended: it is dropped for the new one.
        let later = now + chrono::Duration::seconds(60);
        over_limit.note(&[from_source("late", later)], &[over]);
        assert!(over_limit.holds_any(&[from_source("late", later)]));
        assert!(!over_limit.holds_any(&[from_source("s0", now)]));
    }
}
