//! The delivery queue: claiming due deliveries, recording attempts under the claim-token
//! fence, and handing back claims at shutdown (SPEC section 6.3 and the delivery seeds).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Interval, Json, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::prepared::{bind, PreparedSql};
use super::schema::webhook_deliveries;
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

/// The delivery's state after the owner's attempt. The owner decides it from the cycle
/// count it claimed with: while a worker holds the token nobody else changes that count
/// (late workers leave it alone, and only failed deliveries can be replayed).
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
    Owner { attempt_number: i32, state: String },
    /// The claim had been superseded: only the attempt and `attempts` were recorded.
    Late { attempt_number: i32, state: String },
}

struct RecordAttempt;

/// Binds: token, delivery id, attempt id, URL, attempted at, outcome, status, error,
/// duration, then the owner's state, next attempt time (null: unchanged), completion time.
///
/// One statement, so one transaction: `locked` takes the row lock, so a concurrent
/// recorder waits and then reads the row as this one left it; the attempt number is the
/// next free one from the locked row, never from memory. A worker whose token is gone
/// (late) inserts its attempt marked `late` and raises `attempts`, nothing else.
const RECORD_SQL: &str = "\
WITH locked AS MATERIALIZED (
    SELECT id, submission_id, attempts, (claim_token IS NOT DISTINCT FROM ?) AS owner
    FROM webhook_deliveries
    WHERE id = ?
    FOR UPDATE
), attempt AS (
    INSERT INTO delivery_attempts
        (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at,
         outcome, response_status, error, duration_ms, late)
    SELECT ?, id, submission_id, attempts + 1, ?, ?, ?, ?, ?, ?, NOT owner
    FROM locked
    RETURNING attempt_number
), updated AS (
    UPDATE webhook_deliveries d
    SET attempts = l.attempts + 1,
        cycle_attempts = CASE WHEN l.owner THEN d.cycle_attempts + 1 ELSE d.cycle_attempts END,
        state = CASE WHEN l.owner THEN ? ELSE d.state END,
        next_attempt_at = CASE WHEN l.owner THEN coalesce(?, d.next_attempt_at) ELSE d.next_attempt_at END,
        completed_at = CASE WHEN l.owner THEN ? ELSE d.completed_at END,
        claim_token = CASE WHEN l.owner THEN NULL ELSE d.claim_token END,
        claim_expires_at = CASE WHEN l.owner THEN NULL ELSE d.claim_expires_at END
    FROM locked l
    WHERE d.id = l.id
    RETURNING d.state
)
SELECT (SELECT attempt_number FROM attempt), (SELECT owner FROM locked), (SELECT state FROM updated)";

/// Records one attempt and, for the owner, the transition.
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    record: &AttemptRecord<'_>,
    transition: OwnerTransition,
) -> Result<Recorded, DbError> {
    let (state, next_attempt_at, completed_at) = match transition {
        OwnerTransition::Delivered { at } => ("delivered", None, Some(at)),
        OwnerTransition::Retry { at } => ("pending", Some(at), None),
        OwnerTransition::Failed { at } => ("failed", None, Some(at)),
    };
    let query =
        PreparedSql::<RecordAttempt, (Nullable<Integer>, Nullable<Bool>, Nullable<Text>), _>::new(
            RECORD_SQL,
            (
                bind::<Text, _>(record.claim_token),
                bind::<Text, _>(record.delivery_id),
                bind::<Text, _>(record.attempt_id),
                bind::<Text, _>(record.destination_url),
                bind::<Timestamptz, _>(record.attempted_at),
                bind::<Text, _>(record.outcome),
                bind::<Nullable<Integer>, _>(record.response_status),
                bind::<Nullable<Text>, _>(record.error),
                bind::<Integer, _>(record.duration_ms),
                bind::<Text, _>(state),
                bind::<Nullable<Timestamptz>, _>(next_attempt_at),
                bind::<Nullable<Timestamptz>, _>(completed_at),
            ),
        );
    let (number, owner, state): (Option<i32>, Option<bool>, Option<String>) =
        query.get_result(conn).await?;
    match (number, owner, state) {
        (Some(attempt_number), Some(true), Some(state)) => Ok(Recorded::Owner {
            attempt_number,
            state,
        }),
        (Some(attempt_number), Some(false), Some(state)) => Ok(Recorded::Late {
            attempt_number,
            state,
        }),
        _ => Err(DbError::Query(diesel::result::Error::NotFound)),
    }
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
    fn binds_match_placeholders() {
        assert_eq!(super::CLAIM_SQL.matches('?').count(), 7);
        assert_eq!(super::RECORD_SQL.matches('?').count(), 12);
    }
}
