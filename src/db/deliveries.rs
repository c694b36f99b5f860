//! The delivery queue: claiming due deliveries, recording attempts under the claim-token
//! fence, and handing back claims at shutdown (SPEC section 6.3 and the delivery seeds).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Interval, Json, Nullable, Text, Timestamptz};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::prepared::{bind, PreparedSql};
use super::schema::{delivery_attempts, webhook_deliveries};
use super::DbError;

/// A delivery this worker now holds, with what it needs to send it.
#[derive(Debug, Clone, Queryable)]
pub struct ClaimedDelivery {
    pub id: String,
    pub claim_token: String,
    pub endpoint_id: String,
    pub destination_url: String,
    pub signing_secret: String,
    pub submission_id: Option<String>,
    pub attempts: i32,
    pub cycle_attempts: i32,
    /// The submission's time and fields; `None` when the submission was erased.
    pub received_at: Option<DateTime<Utc>>,
    pub fields: Option<serde_json::Value>,
}

struct ClaimDue;

/// Binds: now, limit, now, limit, limit, lease, now. Leases that ran out are taken first,
/// then pending deliveries in due order; each arm reads its own partial index and skips
/// rows another worker has locked. Every row gets a fresh token; counters stay as they are.
const CLAIM_SQL: &str = "\
WITH expired AS MATERIALIZED (
    SELECT id FROM webhook_deliveries
    WHERE state = 'processing' AND claim_expires_at <= ?
    ORDER BY claim_expires_at
    LIMIT ?
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT id FROM webhook_deliveries
    WHERE state = 'pending' AND next_attempt_at <= ?
    ORDER BY next_attempt_at
    LIMIT ?
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id FROM expired
    UNION ALL
    SELECT id FROM due
    LIMIT ?
)
UPDATE webhook_deliveries d
SET state = 'processing',
    claim_token = 'clm_' || replace(gen_random_uuid()::text, '-', ''),
    claim_expires_at = ? + ?
FROM picked
WHERE d.id = picked.id
RETURNING d.id, d.claim_token, d.endpoint_id, d.destination_url, d.signing_secret,
          d.submission_id, d.attempts, d.cycle_attempts,
          (SELECT s.received_at FROM submissions s WHERE s.id = d.submission_id),
          (SELECT s.fields FROM submissions s WHERE s.id = d.submission_id)";

/// Claims up to `limit` due deliveries in one statement (one transaction that ends with
/// it: no transaction stays open while the requests are made).
pub async fn claim(
    conn: &mut AsyncPgConnection,
    now: DateTime<Utc>,
    lease: std::time::Duration,
    limit: u32,
) -> Result<Vec<ClaimedDelivery>, DbError> {
    let limit = i64::from(limit);
    let lease = diesel::pg::data_types::PgInterval::from_microseconds(lease.as_micros() as i64);
    let query = PreparedSql::<
        ClaimDue,
        (
            Text,
            Text,
            Text,
            Text,
            Text,
            Nullable<Text>,
            Integer,
            Integer,
            Nullable<Timestamptz>,
            Nullable<Json>,
        ),
        _,
    >::new(
        CLAIM_SQL,
        (
            bind::<Timestamptz, _>(now),
            bind::<BigInt, _>(limit),
            bind::<Timestamptz, _>(now),
            bind::<BigInt, _>(limit),
            bind::<BigInt, _>(limit),
            bind::<Timestamptz, _>(now),
            bind::<Interval, _>(lease),
        ),
    );
    Ok(query.load(conn).await?)
}

/// One attempt to record.
#[derive(Debug, Clone)]
pub struct AttemptRecord<'a> {
    pub attempt_id: &'a str,
    pub delivery_id: &'a str,
    pub claim_token: &'a str,
    pub destination_url: &'a str,
    pub attempted_at: DateTime<Utc>,
    pub duration_ms: i32,
    pub outcome: &'a str,
    pub response_status: Option<i32>,
    pub error: Option<&'a str>,
}

/// The delivery's state after the owner's attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerTransition {
    Delivered { at: DateTime<Utc> },
    Retry { at: DateTime<Utc> },
    Failed { at: DateTime<Utc> },
}

/// How an attempt was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The row still carried this worker's token: counters raised, claim cleared, state moved.
    Owner {
        attempt_number: i32,
        state: &'static str,
    },
    /// The claim had been superseded: only the attempt and `attempts` were recorded.
    Late { attempt_number: i32, state: String },
}

#[derive(Queryable)]
struct Locked {
    claim_token: Option<String>,
    attempts: i32,
    cycle_attempts: i32,
    state: String,
    submission_id: Option<String>,
    next_attempt_at: DateTime<Utc>,
}

/// Records one attempt in one transaction that locks the delivery row, so the attempt
/// number read from the row cannot be taken twice. `transition` is told the cycle count
/// after this attempt and returns where the owner moves the delivery.
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    record: &AttemptRecord<'_>,
    transition: impl FnOnce(i32) -> OwnerTransition + Send,
) -> Result<Recorded, DbError> {
    let record = record.clone();
    conn.transaction::<_, diesel::result::Error, _>(async move |conn| {
        {
            let locked: Locked = webhook_deliveries::table
                .find(record.delivery_id)
                .select((
                    webhook_deliveries::claim_token,
                    webhook_deliveries::attempts,
                    webhook_deliveries::cycle_attempts,
                    webhook_deliveries::state,
                    webhook_deliveries::submission_id,
                    webhook_deliveries::next_attempt_at,
                ))
                .for_update()
                .first(conn)
                .await?;
            // The next free lifetime number, from the locked row, never from memory.
            let attempt_number = locked.attempts + 1;
            let owner = locked.claim_token.as_deref() == Some(record.claim_token);
            diesel::insert_into(delivery_attempts::table)
                .values((
                    delivery_attempts::id.eq(record.attempt_id),
                    delivery_attempts::delivery_id.eq(record.delivery_id),
                    delivery_attempts::submission_id.eq(&locked.submission_id),
                    delivery_attempts::attempt_number.eq(attempt_number),
                    delivery_attempts::destination_url.eq(record.destination_url),
                    delivery_attempts::attempted_at.eq(record.attempted_at),
                    delivery_attempts::outcome.eq(record.outcome),
                    delivery_attempts::response_status.eq(record.response_status),
                    delivery_attempts::error.eq(record.error),
                    delivery_attempts::duration_ms.eq(record.duration_ms),
                    delivery_attempts::late.eq(!owner),
                ))
                .execute(conn)
                .await?;
            let row = webhook_deliveries::table.find(record.delivery_id);
            if !owner {
                // A superseded worker records the request it really made, and nothing else:
                // not the lease, the state, the cycle allowance or the due time.
                diesel::update(row)
                    .set(webhook_deliveries::attempts.eq(attempt_number))
                    .execute(conn)
                    .await?;
                return Ok(Recorded::Late {
                    attempt_number,
                    state: locked.state,
                });
            }
            let cycle_attempts = locked.cycle_attempts + 1;
            let unchanged = locked.next_attempt_at;
            let (state, next_attempt_at, completed_at) = match transition(cycle_attempts) {
                OwnerTransition::Delivered { at } => ("delivered", unchanged, Some(at)),
                OwnerTransition::Retry { at } => ("pending", at, None),
                OwnerTransition::Failed { at } => ("failed", unchanged, Some(at)),
            };
            diesel::update(row)
                .set((
                    webhook_deliveries::attempts.eq(attempt_number),
                    webhook_deliveries::cycle_attempts.eq(cycle_attempts),
                    webhook_deliveries::state.eq(state),
                    webhook_deliveries::claim_token.eq(None::<String>),
                    webhook_deliveries::claim_expires_at.eq(None::<DateTime<Utc>>),
                    webhook_deliveries::completed_at.eq(completed_at),
                    webhook_deliveries::next_attempt_at.eq(next_attempt_at),
                ))
                .execute(conn)
                .await?;
            Ok(Recorded::Owner {
                attempt_number,
                state,
            })
        }
    })
    .await
    .map_err(DbError::from)
}

/// Ends a claim without an attempt (the submission was erased before it could be sent):
/// the delivery fails, guarded by the token like every owner transition.
pub async fn fail_without_attempt(
    conn: &mut AsyncPgConnection,
    delivery_id: &str,
    claim_token: &str,
    now: DateTime<Utc>,
) -> Result<bool, DbError> {
    let updated = diesel::update(
        webhook_deliveries::table
            .find(delivery_id)
            .filter(webhook_deliveries::claim_token.eq(claim_token)),
    )
    .set((
        webhook_deliveries::state.eq("failed"),
        webhook_deliveries::claim_token.eq(None::<String>),
        webhook_deliveries::claim_expires_at.eq(None::<DateTime<Utc>>),
        webhook_deliveries::completed_at.eq(now),
    ))
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// Gives back a claim whose request never started (shutdown), if this worker still holds
/// it: `pending` again, still due, counters untouched.
pub async fn hand_back(
    conn: &mut AsyncPgConnection,
    delivery_id: &str,
    claim_token: &str,
) -> Result<bool, DbError> {
    let updated = diesel::update(
        webhook_deliveries::table
            .find(delivery_id)
            .filter(webhook_deliveries::claim_token.eq(claim_token)),
    )
    .set((
        webhook_deliveries::state.eq("pending"),
        webhook_deliveries::claim_token.eq(None::<String>),
        webhook_deliveries::claim_expires_at.eq(None::<DateTime<Utc>>),
    ))
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// The earliest moment something becomes claimable: a pending delivery's due time or a
/// lease's expiry. Both read the claiming indexes.
pub async fn next_due_at(conn: &mut AsyncPgConnection) -> Result<Option<DateTime<Utc>>, DbError> {
    let pending: Option<DateTime<Utc>> = webhook_deliveries::table
        .filter(webhook_deliveries::state.eq("pending"))
        .select(diesel::dsl::min(webhook_deliveries::next_attempt_at))
        .first(conn)
        .await?;
    let expiring: Option<DateTime<Utc>> = webhook_deliveries::table
        .filter(webhook_deliveries::state.eq("processing"))
        .select(diesel::dsl::min(webhook_deliveries::claim_expires_at))
        .first(conn)
        .await?;
    Ok(match (pending, expiring) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn claim_binds_match_placeholders() {
        assert_eq!(super::CLAIM_SQL.matches('?').count(), 7);
    }
}
