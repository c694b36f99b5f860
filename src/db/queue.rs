//! The worker's statements: claiming due deliveries, recording attempts under the
//! claim-token fence, ending or handing back claims, and how long until something is due.
//! Times that decide (due, lease, completion) are the database's unless a test pins them.

use chrono::{DateTime, Utc};
use diesel::pg::data_types::PgInterval;
use diesel::sql_types::{BigInt, Bool, Integer, Interval, Json, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::ClaimedDelivery;
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::{AttemptId, ClaimToken, DeliveryId};
use crate::model::state::{AttemptOutcome, DeliveryState};

/// Public for the benchmarks, which run it through pgbench.
pub static CLAIM: SqlText = sql!("claim.sql", with_events);
struct Claim;

/// What a claim asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest {
    /// `None`: the database's clock decides what is due and when leases end.
    pub now: Option<DateTime<Utc>>,
    pub lease: std::time::Duration,
    pub limit: u32,
    /// Requests in flight allowed per endpoint, across every process.
    pub endpoint_concurrency: u32,
}

/// Claims up to `limit` due deliveries in one statement (claim.sql).
pub async fn claim(
    conn: &mut AsyncPgConnection,
    request: ClaimRequest,
) -> Result<Vec<ClaimedDelivery>, DbError> {
    let query = Statement::<
        Claim,
        (
            Text,
            Text,
            Text,
            Text,
            Text,
            Nullable<Text>,
            Integer,
            Nullable<Timestamptz>,
            Nullable<Json>,
        ),
        _,
    >::new(
        &CLAIM,
        (
            bind::<Nullable<Timestamptz>, _>(request.now),
            bind::<Interval, _>(interval(request.lease)),
            bind::<Integer, _>(clamp_i32(request.limit)),
            bind::<Integer, _>(clamp_i32(request.endpoint_concurrency)),
        ),
    );
    Ok(query.load(conn).await?)
}

fn clamp_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// A duration as a PostgreSQL interval (microseconds; saturating far beyond any setting).
pub fn interval(duration: std::time::Duration) -> PgInterval {
    PgInterval::from_microseconds(i64::try_from(duration.as_micros()).unwrap_or(i64::MAX))
}

/// One attempt to record.
#[derive(Debug, Clone)]
pub struct AttemptRecord<'a> {
    pub attempt_id: &'a AttemptId,
    pub delivery_id: &'a DeliveryId,
    pub claim_token: &'a ClaimToken,
    pub destination_url: &'a str,
    pub attempted_at: DateTime<Utc>,
    pub duration_ms: i32,
    pub outcome: AttemptOutcome,
    pub response_status: Option<i32>,
    pub error: Option<&'a str>,
}

/// The delivery's state after the owner's attempt. The owner decides it from the cycle
/// count it claimed with: while a worker holds the token nobody else changes that count
/// (late workers leave it alone, and only failed deliveries can be replayed). Times are
/// the database's, so every process schedules by the same clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerTransition {
    Delivered,
    /// Pending again, due this long after the attempt is recorded.
    Retry {
        after: std::time::Duration,
    },
    Failed,
}

/// How an attempt was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The row still carried this worker's token: counters raised, claim cleared, state moved.
    Owner {
        attempt_number: i32,
        state: DeliveryState,
    },
    /// The claim had been superseded: only the attempt and `attempts` were recorded.
    Late {
        attempt_number: i32,
        state: DeliveryState,
    },
}

/// Public for the benchmarks, which run it through pgbench.
pub static RECORD_ATTEMPT: SqlText = sql!("record_attempt.sql", with_events);
struct RecordAttempt;

/// Records one attempt and, for the owner, the transition (record_attempt.sql).
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    record: &AttemptRecord<'_>,
    transition: OwnerTransition,
    now: Option<DateTime<Utc>>,
) -> Result<Recorded, DbError> {
    let (state, retry_after) = match transition {
        OwnerTransition::Delivered => (DeliveryState::Delivered, None),
        OwnerTransition::Retry { after } => (DeliveryState::Pending, Some(interval(after))),
        OwnerTransition::Failed => (DeliveryState::Failed, None),
    };
    let query =
        Statement::<RecordAttempt, (Nullable<Integer>, Nullable<Bool>, Nullable<Text>), _>::new(
            &RECORD_ATTEMPT,
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
                bind::<Nullable<Interval>, _>(retry_after),
                bind::<Nullable<Timestamptz>, _>(now),
            ),
        );
    let (number, owner, state): (Option<i32>, Option<bool>, Option<DeliveryState>) =
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

static FAIL_WITHOUT_ATTEMPT: SqlText = sql!("fail_without_attempt.sql", with_events);
struct FailWithoutAttempt;

/// Ends a claim without an attempt (fail_without_attempt.sql); whether the claim was
/// still this worker's.
pub async fn fail_without_attempt(
    conn: &mut AsyncPgConnection,
    delivery_id: &DeliveryId,
    claim_token: &ClaimToken,
    now: Option<DateTime<Utc>>,
) -> Result<bool, DbError> {
    let changed: i64 = Statement::<FailWithoutAttempt, BigInt, _>::new(
        &FAIL_WITHOUT_ATTEMPT,
        (
            bind::<Text, _>(delivery_id),
            bind::<Text, _>(claim_token),
            bind::<Nullable<Timestamptz>, _>(now),
        ),
    )
    .get_result(conn)
    .await?;
    Ok(changed > 0)
}

static HAND_BACK: SqlText = sql!("hand_back.sql", with_events);
struct HandBack;

/// Gives back a claim whose request never started (hand_back.sql); whether the claim was
/// still this worker's.
pub async fn hand_back(
    conn: &mut AsyncPgConnection,
    delivery_id: &DeliveryId,
    claim_token: &ClaimToken,
) -> Result<bool, DbError> {
    let changed: i64 = Statement::<HandBack, BigInt, _>::new(
        &HAND_BACK,
        (bind::<Text, _>(delivery_id), bind::<Text, _>(claim_token)),
    )
    .get_result(conn)
    .await?;
    Ok(changed > 0)
}

static NEXT_DUE: SqlText = sql!("next_due.sql");
struct NextDue;

/// How long until something may become claimable (next_due.sql): `None` when nothing is
/// queued, zero when something is due already.
pub async fn next_due_in(
    conn: &mut AsyncPgConnection,
    now: Option<DateTime<Utc>>,
) -> Result<Option<std::time::Duration>, DbError> {
    let wait: Option<PgInterval> = Statement::<NextDue, Nullable<Interval>, _>::new(
        &NEXT_DUE,
        (bind::<Nullable<Timestamptz>, _>(now),),
    )
    .get_result(conn)
    .await?;
    Ok(wait.map(|wait| {
        // No months in a difference of two times; days count as 24 hours.
        let micros = wait.microseconds + i64::from(wait.days) * 86_400_000_000;
        std::time::Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }))
}
