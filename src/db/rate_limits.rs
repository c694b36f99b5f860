//! Fixed-window counters in `rate_limit_counters`, shared by every process.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use std::collections::{BTreeMap, HashMap};

use diesel::sql_types::{Array, Integer, Text, Timestamptz};

use super::schema::rate_limit_counters;
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;

/// One fixed-window counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey {
    pub limiter: &'static str,
    pub subject: String,
    pub window_start: DateTime<Utc>,
}

static COUNT_ATTEMPTS: SqlText = sql!("count_attempts.sql");
struct CountAttempts;

/// Adds `n` attempts to each counter of `counts` in one statement (count_attempts.sql)
/// and returns each counter's total including them, in the keys' order. The keys are
/// written in sorted order. One atomic upsert per counter, so concurrent batches in any
/// number of processes each see distinct totals.
pub async fn count_attempts(
    conn: &mut AsyncPgConnection,
    counts: &BTreeMap<CounterKey, i32>,
) -> Result<Vec<i32>, DbError> {
    let limiters: Vec<&str> = counts.keys().map(|k| k.limiter).collect();
    let subjects: Vec<&str> = counts.keys().map(|k| k.subject.as_str()).collect();
    let starts: Vec<DateTime<Utc>> = counts.keys().map(|k| k.window_start).collect();
    let attempts: Vec<i32> = counts.values().copied().collect();
    let totals: Vec<(String, String, DateTime<Utc>, i32)> =
        Statement::<CountAttempts, (Text, Text, Timestamptz, Integer), _>::new(
            &COUNT_ATTEMPTS,
            (
                bind::<Array<Text>, _>(limiters),
                bind::<Array<Text>, _>(subjects),
                bind::<Array<Timestamptz>, _>(starts),
                bind::<Array<Integer>, _>(attempts),
            ),
        )
        .load(conn)
        .await?;
    let by_key: HashMap<(String, String, DateTime<Utc>), i32> = totals
        .into_iter()
        .map(|(limiter, subject, window_start, total)| ((limiter, subject, window_start), total))
        .collect();
    // Every counter was upserted, so every key has its row; one missing is a broken
    // statement, not a count to guess.
    counts
        .keys()
        .map(|key| {
            by_key
                .get(&(
                    key.limiter.to_string(),
                    key.subject.clone(),
                    key.window_start,
                ))
                .copied()
                .ok_or(DbError::Query(diesel::result::Error::NotFound))
        })
        .collect()
}

/// Deletes counters of windows that started before `before`; returns how many.
pub async fn sweep(conn: &mut AsyncPgConnection, before: DateTime<Utc>) -> Result<usize, DbError> {
    Ok(diesel::delete(
        rate_limit_counters::table.filter(rate_limit_counters::window_start.lt(before)),
    )
    .execute(conn)
    .await?)
}
