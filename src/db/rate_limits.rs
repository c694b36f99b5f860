//! Fixed-window counters in `rate_limit_counters`, shared by every process.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Integer, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::rate_limit_counters;
use super::DbError;

#[derive(QueryableByName)]
struct Attempts {
    #[diesel(sql_type = Integer)]
    attempts: i32,
}

/// Counts one attempt in the window and returns the count including it. One atomic
/// upsert, so concurrent requests in any number of processes each see a distinct count.
pub async fn count_attempt(
    conn: &mut AsyncPgConnection,
    limiter: &str,
    subject: &str,
    window_start: DateTime<Utc>,
) -> Result<i32, DbError> {
    let row: Attempts = diesel::sql_query(
        "INSERT INTO rate_limit_counters (limiter, subject, window_start, attempts)
         VALUES ($1, $2, $3, 1)
         ON CONFLICT (limiter, subject, window_start)
         DO UPDATE SET attempts = rate_limit_counters.attempts + 1
         RETURNING attempts",
    )
    .bind::<Text, _>(limiter)
    .bind::<Text, _>(subject)
    .bind::<Timestamptz, _>(window_start)
    .get_result(conn)
    .await?;
    Ok(row.attempts)
}

/// Deletes counters of windows that started before `before`; returns how many.
pub async fn sweep(conn: &mut AsyncPgConnection, before: DateTime<Utc>) -> Result<usize, DbError> {
    Ok(diesel::delete(
        rate_limit_counters::table.filter(rate_limit_counters::window_start.lt(before)),
    )
    .execute(conn)
    .await?)
}
