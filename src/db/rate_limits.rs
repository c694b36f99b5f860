//! Fixed-window counters in `rate_limit_counters`, shared by every process.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::rate_limit_counters;
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;

/// A fixed-window counter: whom it counts (an address digest, an endpoint id) and the
/// start of its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Counter<'a> {
    pub subject: &'a str,
    pub window_start: DateTime<Utc>,
}

/// One request of a batch, with the counters it is counted on.
#[derive(Debug, Clone, Copy)]
pub struct CountedRequest<'a> {
    /// Its per-source counter (rate limiting on), and that counter's limit.
    pub source: Option<(Counter<'a>, u32)>,
    /// Its per-endpoint counter, counted only when it is within the per-source limit.
    pub endpoint: Option<Counter<'a>>,
}

/// A request's counts including itself, on each counter it was counted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub source: Option<i64>,
    pub endpoint: Option<i64>,
}

/// A batch's requests added up per counter, each counter with its limit, for the outbox
/// statement to count as its last step and to fail on if any counter ends over its limit
/// (outbox_insert_batch.sql): in the order count_attempts.sql locks them (the per-source
/// counters, then the per-endpoint ones, each sorted by the subject's bytes: Rust's order
/// of `str`, PostgreSQL's `COLLATE "C"`).
#[derive(Debug, Default)]
pub struct BatchCounters<'a> {
    pub limiters: Vec<&'a str>,
    pub subjects: Vec<&'a str>,
    pub window_starts: Vec<DateTime<Utc>>,
    pub attempts: Vec<i32>,
    pub limits: Vec<i32>,
}

/// Per counter (subject, window start): the requests added up, and the counter's limit.
type AddedUp<'a> = BTreeMap<(&'a str, DateTime<Utc>), (i32, u32)>;

impl<'a> BatchCounters<'a> {
    /// Every request counted on each of its counters, as if every one were within its
    /// limits: `requests` gives each request's per-source and per-endpoint counter with
    /// its limit; `limiters` names the two scopes' counters (per source, per endpoint).
    pub fn every_request(
        requests: impl IntoIterator<Item = [Option<(Counter<'a>, u32)>; 2]>,
        limiters: (&'a str, &'a str),
    ) -> BatchCounters<'a> {
        let mut scopes: [AddedUp<'a>; 2] = Default::default();
        for counters in requests {
            for (scope, counter) in scopes.iter_mut().zip(counters) {
                if let Some((counter, limit)) = counter {
                    let added = scope
                        .entry((counter.subject, counter.window_start))
                        .or_insert((0, limit));
                    added.0 += 1;
                    // One counter, one limit; should two requests disagree, the lower holds.
                    added.1 = added.1.min(limit);
                }
            }
        }
        let mut batch = BatchCounters::default();
        for (limiter, scope) in [limiters.0, limiters.1].into_iter().zip(scopes) {
            for ((subject, window_start), (attempts, limit)) in scope {
                batch.limiters.push(limiter);
                batch.subjects.push(subject);
                batch.window_starts.push(window_start);
                batch.attempts.push(attempts);
                batch.limits.push(i32::try_from(limit).unwrap_or(i32::MAX));
            }
        }
        batch
    }
}

static COUNT_ATTEMPTS: SqlText = sql!("count_attempts.sql");
struct CountAttempts;

/// Counts a batch of requests in one statement (count_attempts.sql): each on its
/// per-source counter, and those whose per-source count is within its limit on their
/// per-endpoint counter. `limiters` names the two scopes' counters (per source, per
/// endpoint). Answers each request's counts, in the batch's order. Atomic upserts, so
/// concurrent batches in any number of processes each see distinct counts.
///
/// The statement answers each counter's value after the batch; a request's own count is
/// that value less the batch's later requests on the same counter (worked out here, not
/// by window functions in the statement, which cost more than the upserts themselves).
pub async fn count_attempts(
    conn: &mut AsyncPgConnection,
    requests: &[CountedRequest<'_>],
    limiters: (&str, &str),
) -> Result<Vec<Counts>, DbError> {
    let source_counters: Vec<Option<Counter<'_>>> =
        requests.iter().map(|r| r.source.map(|(c, _)| c)).collect();
    let source_later = later_on_same_counter(&source_counters);
    // Counted per endpoint only if within the per-source limit, which the statement tells.
    let endpoints_asked: Vec<Option<Counter<'_>>> = requests.iter().map(|r| r.endpoint).collect();
    let source_limits: Vec<Option<i32>> = requests
        .iter()
        .map(|r| {
            r.source
                .map(|(_, limit)| i32::try_from(limit).unwrap_or(i32::MAX))
        })
        .collect();
    let rows: Vec<(bool, String, DateTime<Utc>, i64)> =
        Statement::<CountAttempts, (Bool, Text, Timestamptz, BigInt), _>::new(
            &COUNT_ATTEMPTS,
            (
                bind::<Array<Nullable<Text>>, _>(subjects(&source_counters)),
                bind::<Array<Nullable<Timestamptz>>, _>(window_starts(&source_counters)),
                bind::<Array<Nullable<Integer>>, _>(&source_limits),
                bind::<Array<Nullable<Integer>>, _>(&source_later),
                bind::<Array<Nullable<Text>>, _>(subjects(&endpoints_asked)),
                bind::<Array<Nullable<Timestamptz>>, _>(window_starts(&endpoints_asked)),
                bind::<Text, _>(limiters.0),
                bind::<Text, _>(limiters.1),
            ),
        )
        .load(conn)
        .await?;
    let mut totals: HashMap<(bool, &str, DateTime<Utc>), i64> = HashMap::new();
    for (per_endpoint, subject, window_start, attempts) in &rows {
        totals.insert((*per_endpoint, subject, *window_start), *attempts);
    }
    // Matched on the window start as the database answers it (microseconds), which is
    // exact for intake's windows (whole seconds). A counter the statement should have
    // counted on and did not answer is a broken statement, not a count to guess.
    let total = |per_endpoint: bool, counter: Counter<'_>| {
        totals
            .get(&(per_endpoint, counter.subject, counter.window_start))
            .copied()
            .ok_or(DbError::Query(diesel::result::Error::NotFound))
    };

    let mut source_counts = Vec::with_capacity(requests.len());
    for ((counter, later), limit) in source_counters
        .iter()
        .zip(&source_later)
        .zip(&source_limits)
    {
        source_counts.push(match (counter, later, limit) {
            (Some(counter), Some(later), Some(limit)) => {
                let count = total(false, *counter)? - i64::from(*later);
                // The statement's own test of the per-source limit, to the letter.
                Some((count, count <= i64::from(*limit)))
            }
            _ => None,
        });
    }
    // Counted per endpoint: those within their per-source limit, or not counted per source.
    let endpoint_counters: Vec<Option<Counter<'_>>> = endpoints_asked
        .iter()
        .zip(&source_counts)
        .map(|(endpoint, source)| match source {
            Some((_, false)) => None,
            _ => *endpoint,
        })
        .collect();
    let endpoint_later = later_on_same_counter(&endpoint_counters);
    let mut counts = Vec::with_capacity(requests.len());
    for ((counter, later), source) in endpoint_counters
        .iter()
        .zip(&endpoint_later)
        .zip(&source_counts)
    {
        let endpoint = match (counter, later) {
            (Some(counter), Some(later)) => Some(total(true, *counter)? - i64::from(*later)),
            _ => None,
        };
        counts.push(Counts {
            source: source.map(|(count, _)| count),
            endpoint,
        });
    }
    Ok(counts)
}

/// For each request counted on a counter, how many later requests of the batch are
/// counted on the same one.
fn later_on_same_counter(counters: &[Option<Counter<'_>>]) -> Vec<Option<i32>> {
    let mut seen: HashMap<Counter<'_>, i32> = HashMap::new();
    let mut later = vec![None; counters.len()];
    for (slot, counter) in later.iter_mut().zip(counters).rev() {
        if let Some(counter) = counter {
            let after = seen.entry(*counter).or_insert(0);
            *slot = Some(*after);
            *after += 1;
        }
    }
    later
}

fn subjects<'a>(counters: &[Option<Counter<'a>>]) -> Vec<Option<&'a str>> {
    counters.iter().map(|c| c.map(|c| c.subject)).collect()
}

fn window_starts(counters: &[Option<Counter<'_>>]) -> Vec<Option<DateTime<Utc>>> {
    counters.iter().map(|c| c.map(|c| c.window_start)).collect()
}

/// Deletes counters of windows that started before `before`; returns how many.
pub async fn sweep(conn: &mut AsyncPgConnection, before: DateTime<Utc>) -> Result<usize, DbError> {
    Ok(diesel::delete(
        rate_limit_counters::table.filter(rate_limit_counters::window_start.lt(before)),
    )
    .execute(conn)
    .await?)
}
