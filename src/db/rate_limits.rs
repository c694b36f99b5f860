//! Fixed-window counters in `rate_limit_counters`, shared by every process.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::rate_limit_counters;
use super::DbError;

/// Counts one attempt in the window and returns the count including it. One atomic
/// upsert, so concurrent requests in any number of processes each see a distinct count.
pub async fn count_attempt(
    conn: &mut AsyncPgConnection,
    limiter: &str,
    subject: &str,
    window_start: DateTime<Utc>,
) -> Result<i32, DbError> {
    use rate_limit_counters::dsl;
    // Built with the query builder (not `sql_query`) so the statement is prepared once
    // per connection and reused: this runs on every public request.
    Ok(diesel::insert_into(dsl::rate_limit_counters)
        .values((
            dsl::limiter.eq(limiter),
            dsl::subject.eq(subject),
            dsl::window_start.eq(window_start),
            dsl::attempts.eq(1),
        ))
        .on_conflict((dsl::limiter, dsl::subject, dsl::window_start))
        .do_update()
        .set(dsl::attempts.eq(dsl::attempts + 1))
        .returning(dsl::attempts)
        .get_result(conn)
        .await?)
}

/// Deletes counters of windows that started before `before`; returns how many.
pub async fn sweep(conn: &mut AsyncPgConnection, before: DateTime<Utc>) -> Result<usize, DbError> {
    Ok(diesel::delete(
        rate_limit_counters::table.filter(rate_limit_counters::window_start.lt(before)),
    )
    .execute(conn)
    .await?)
}
