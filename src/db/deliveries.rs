//! The delivery queue: claiming due deliveries, recording attempts under the claim-token
//! fence, and handing back claims at shutdown (SPEC section 6.3 and the delivery seeds).

use chrono::{DateTime, Utc};
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Interval, Json, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::webhook_deliveries;
use super::statement::{bind, sql, SqlText, Statement};
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

static CLAIM: SqlText = sql!("claim.sql", with_events);
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
    Owner { attempt_number: i32, state: String },
    /// The claim had been superseded: only the attempt and `attempts` were recorded.
    Late { attempt_number: i32, state: String },
}

static RECORD_ATTEMPT: SqlText = sql!("record_attempt.sql", with_events);
struct RecordAttempt;

/// Records one attempt and, for the owner, the transition (record_attempt.sql).
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    record: &AttemptRecord<'_>,
    transition: OwnerTransition,
    now: Option<DateTime<Utc>>,
) -> Result<Recorded, DbError> {
    let (state, retry_after) = match transition {
        OwnerTransition::Delivered => ("delivered", None),
        OwnerTransition::Retry { after } => ("pending", Some(interval(after))),
        OwnerTransition::Failed => ("failed", None),
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

static FAIL_WITHOUT_ATTEMPT: SqlText = sql!("fail_without_attempt.sql", with_events);
struct FailWithoutAttempt;

/// Ends a claim without an attempt (fail_without_attempt.sql); whether the claim was
/// still this worker's.
pub async fn fail_without_attempt(
    conn: &mut AsyncPgConnection,
    delivery_id: &str,
    claim_token: &str,
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
    delivery_id: &str,
    claim_token: &str,
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

/// A delivery as the management API reads it: every column but the signing secret.
#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = webhook_deliveries)]
pub struct DeliveryRow {
    pub id: String,
    pub submission_id: Option<String>,
    pub endpoint_id: String,
    pub destination_url: String,
    pub state: String,
    pub attempts: i32,
    pub cycle_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub claim_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = super::schema::delivery_attempts)]
pub struct AttemptRow {
    pub delivery_id: String,
    pub attempt_number: i32,
    pub attempted_at: DateTime<Utc>,
    pub outcome: String,
    pub response_status: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i32,
    pub late: bool,
}

#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub endpoint_id: Option<String>,
    pub state: Option<String>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
}

pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[String],
) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(webhook_deliveries::table
        .filter(webhook_deliveries::id.eq_any(ids))
        .select(DeliveryRow::as_select())
        .load(conn)
        .await?)
}

pub async fn for_submissions(
    conn: &mut AsyncPgConnection,
    submission_ids: &[String],
) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(webhook_deliveries::table
        .filter(webhook_deliveries::submission_id.eq_any(submission_ids))
        .select(DeliveryRow::as_select())
        .load(conn)
        .await?)
}

/// Every attempt of the given deliveries, in number order.
pub async fn attempts_for(
    conn: &mut AsyncPgConnection,
    delivery_ids: &[String],
) -> Result<Vec<AttemptRow>, DbError> {
    use super::schema::delivery_attempts;
    Ok(delivery_attempts::table
        .filter(delivery_attempts::delivery_id.eq_any(delivery_ids))
        .order((
            delivery_attempts::delivery_id,
            delivery_attempts::attempt_number,
        ))
        .select(AttemptRow::as_select())
        .load(conn)
        .await?)
}

/// Newest first; `after` is the (created_at, id) of the last row of the previous page.
pub async fn page(
    conn: &mut AsyncPgConnection,
    filter: &DeliveryFilter,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
) -> Result<Vec<DeliveryRow>, DbError> {
    let mut query = webhook_deliveries::table
        .select(DeliveryRow::as_select())
        .into_boxed();
    if let Some(endpoint_id) = &filter.endpoint_id {
        query = query.filter(webhook_deliveries::endpoint_id.eq(endpoint_id.clone()));
    }
    if let Some(state) = &filter.state {
        query = query.filter(webhook_deliveries::state.eq(state.clone()));
    }
    if let Some(after) = filter.created_after {
        query = query.filter(webhook_deliveries::created_at.gt(after));
    }
    if let Some(before) = filter.created_before {
        query = query.filter(webhook_deliveries::created_at.lt(before));
    }
    if let Some((created_at, id)) = after {
        query = query.filter(super::keyset_before("created_at", "id", created_at, id));
    }
    Ok(query
        .order((
            webhook_deliveries::created_at.desc(),
            webhook_deliveries::id.desc(),
        ))
        .limit(limit)
        .load(conn)
        .await?)
}

static DELIVERIES_FIRST_PAGES: SqlText = sql!("deliveries_first_pages.sql");
struct DeliveriesFirstPages;

/// The first `limit` deliveries (newest first) of each endpoint, in one statement.
pub async fn first_pages(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[String],
    limit: i64,
) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(Statement::<DeliveriesFirstPages, DeliveryRowSql, _>::new(
        &DELIVERIES_FIRST_PAGES,
        (
            bind::<diesel::sql_types::Array<Text>, _>(endpoint_ids),
            bind::<BigInt, _>(limit),
        ),
    )
    .load(conn)
    .await?)
}

/// The SQL types of a [`DeliveryRow`], in its column order, for hand-written statements.
type DeliveryRowSql = (
    Text,
    Nullable<Text>,
    Text,
    Text,
    Text,
    Integer,
    Integer,
    Timestamptz,
    Nullable<Timestamptz>,
    Timestamptz,
    Nullable<Timestamptz>,
);

/// How many deliveries are in each state, optionally for one endpoint, without scanning
/// the history: delivered and failed from the counts the triggers keep (migration
/// `delivery_state_counts`), pending and processing (the queue) from their partial indexes.
pub async fn count_by_state(
    conn: &mut AsyncPgConnection,
    endpoint_id: Option<&str>,
) -> Result<Vec<(String, i64)>, DbError> {
    use super::schema::delivery_state_counts;
    let mut terminal = delivery_state_counts::table
        .group_by(delivery_state_counts::state)
        .select((
            delivery_state_counts::state,
            diesel::dsl::sql::<BigInt>("sum(deliveries)::bigint"),
        ))
        .into_boxed();
    if let Some(endpoint_id) = endpoint_id {
        terminal = terminal.filter(delivery_state_counts::endpoint_id.eq(endpoint_id.to_string()));
    }
    let mut counts: Vec<(String, i64)> = terminal.load(conn).await?;
    // One count per queue state, each condition matching a partial index exactly (an
    // `IN` list would match neither and scan the whole history).
    for state in ["pending", "processing"] {
        let mut queued = webhook_deliveries::table
            .filter(webhook_deliveries::state.eq(state))
            .count()
            .into_boxed();
        if let Some(endpoint_id) = endpoint_id {
            queued = queued.filter(webhook_deliveries::endpoint_id.eq(endpoint_id.to_string()));
        }
        counts.push((state.to_string(), queued.get_result(conn).await?));
    }
    Ok(counts)
}

/// What a single replay did.
#[derive(Debug, Clone)]
pub enum ReplayOutcome {
    Replayed(DeliveryRow),
    NotFound,
    /// Not `failed`, or its submission was erased (`submission_erased`).
    NotReplayable {
        state: String,
        submission_erased: bool,
    },
}

static REPLAY_ONE: SqlText = sql!("replay_one.sql", with_events);
struct ReplayOne;

/// Puts a failed delivery back in the queue (replay_one.sql); when it cannot be, says why.
pub async fn replay(
    conn: &mut AsyncPgConnection,
    id: &str,
    now: Option<DateTime<Utc>>,
) -> Result<ReplayOutcome, DbError> {
    let replayed: Option<DeliveryRow> = Statement::<ReplayOne, DeliveryRowSql, _>::new(
        &REPLAY_ONE,
        (bind::<Text, _>(id), bind::<Nullable<Timestamptz>, _>(now)),
    )
    .get_result(conn)
    .await
    .optional()?;
    if let Some(row) = replayed {
        return Ok(ReplayOutcome::Replayed(row));
    }
    let current: Option<(String, Option<String>)> = webhook_deliveries::table
        .find(id)
        .select((webhook_deliveries::state, webhook_deliveries::submission_id))
        .first(conn)
        .await
        .optional()?;
    Ok(match current {
        None => ReplayOutcome::NotFound,
        Some((state, submission_id)) => ReplayOutcome::NotReplayable {
            state,
            submission_erased: submission_id.is_none(),
        },
    })
}

/// Which failed deliveries a bulk replay takes: exclusive bounds on `completed_at`.
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    pub endpoint_id: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
}

static REPLAY_MATCHING: SqlText = sql!("replay_matching.sql", with_events);
struct ReplayMatching;

/// Replays every failed delivery matching the filter in one statement (replay_matching.sql);
/// returns how many.
pub async fn replay_matching(
    conn: &mut AsyncPgConnection,
    filter: &ReplayFilter,
    now: Option<DateTime<Utc>>,
) -> Result<usize, DbError> {
    let (replayed, _notified): (i64, i64) = Statement::<ReplayMatching, (BigInt, BigInt), _>::new(
        &REPLAY_MATCHING,
        (
            bind::<Nullable<Text>, _>(filter.endpoint_id.as_deref()),
            bind::<Nullable<Timestamptz>, _>(filter.failed_after),
            bind::<Nullable<Timestamptz>, _>(filter.failed_before),
            bind::<Nullable<Timestamptz>, _>(now),
        ),
    )
    .get_result(conn)
    .await?;
    Ok(usize::try_from(replayed).unwrap_or(0))
}
