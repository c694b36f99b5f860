//! Fixed-window counters in `rate_limit_counters`, shared by every process.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text, Timestamptz};

use super::schema::rate_limit_counters;
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;

/// A fixed-window counter: whom it counts (an address digest, an endpoint id) and the
/// start of its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

static COUNT_ATTEMPTS: SqlText = sql!("count_attempts.sql");
struct CountAttempts;

/// Counts a batch of requests in one statement (count_attempts.sql): each on its
/// per-source counter, and those whose per-source count is within its limit on their
/// per-endpoint counter. `limiters` names the two scopes' counters (per source, per
/// endpoint). Answers each request's counts, in the batch's order. Atomic upserts, so
/// concurrent batches in any number of processes each see distinct counts.
pub async fn count_attempts(
    conn: &mut AsyncPgConnection,
    requests: &[CountedRequest<'_>],
    limiters: (&str, &str),
) -> Result<Vec<Counts>, DbError> {
    let sources: Vec<Option<&str>> = requests
        .iter()
        .map(|r| r.source.map(|(c, _)| c.subject))
        .collect();
    let source_windows: Vec<Option<DateTime<Utc>>> = requests
        .iter()
        .map(|r| r.source.map(|(c, _)| c.window_start))
        .collect();
    let source_limits: Vec<Option<i32>> = requests
        .iter()
        .map(|r| {
            r.source
                .map(|(_, limit)| i32::try_from(limit).unwrap_or(i32::MAX))
        })
        .collect();
    let endpoints: Vec<Option<&str>> = requests
        .iter()
        .map(|r| r.endpoint.map(|c| c.subject))
        .collect();
    let endpoint_windows: Vec<Option<DateTime<Utc>>> = requests
        .iter()
        .map(|r| r.endpoint.map(|c| c.window_start))
        .collect();
    let rows: Vec<(i64, Option<i64>, Option<i64>)> =
        Statement::<CountAttempts, (BigInt, Nullable<BigInt>, Nullable<BigInt>), _>::new(
            &COUNT_ATTEMPTS,
            (
                bind::<Array<Nullable<Text>>, _>(sources),
                bind::<Array<Nullable<Timestamptz>>, _>(source_windows),
                bind::<Array<Nullable<Integer>>, _>(source_limits),
                bind::<Array<Nullable<Text>>, _>(endpoints),
                bind::<Array<Nullable<Timestamptz>>, _>(endpoint_windows),
                bind::<Text, _>(limiters.0),
                bind::<Text, _>(limiters.1),
            ),
        )
        .load(conn)
        .await?;
    // One row per request, in order; anything else is a broken statement, not a count
    // to guess.
    if rows.len() != requests.len()
        || rows
            .iter()
            .zip(1..)
            .any(|((position, _, _), expected)| *position != expected)
    {
        return Err(DbError::Query(diesel::result::Error::NotFound));
    }
    Ok(rows
        .into_iter()
        .map(|(_, source, endpoint)| Counts { source, endpoint })
        .collect())
}

/// Deletes counters of windows that started before `before`; returns how many.
pub async fn sweep(conn: &mut AsyncPgConnection, before: DateTime<Utc>) -> Result<usize, DbError> {
    Ok(diesel::delete(
        rate_limit_counters::table.filter(rate_limit_counters::window_start.lt(before)),
    )
    .execute(conn)
    .await?)
}
