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
/// Each claim's `claimed` event is written by the same statement.
const CLAIM_SQL: &str = "\
WITH expired AS MATERIALIZED (
    SELECT id, state FROM webhook_deliveries
    WHERE state = 'processing' AND claim_expires_at <= ?
    ORDER BY claim_expires_at
    LIMIT ?
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT id, state FROM webhook_deliveries
    WHERE state = 'pending' AND next_attempt_at <= ?
    ORDER BY next_attempt_at
    LIMIT ?
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id, state FROM expired
    UNION ALL
    SELECT id, state FROM due
    LIMIT ?
), claimed AS (
    UPDATE webhook_deliveries d
    SET state = 'processing',
        claim_token = 'clm_' || replace(gen_random_uuid()::text, '-', ''),
        claim_expires_at = ? + ?
    FROM picked
    WHERE d.id = picked.id
    RETURNING d.id, d.claim_token, d.endpoint_id, d.destination_url, d.signing_secret,
              d.submission_id, d.attempts, d.cycle_attempts, picked.state AS previous_state
), claimed_events AS (
    INSERT INTO delivery_events
        (delivery_id, endpoint_id, kind, state, previous_state, attempts, cycle_attempts,
         occurred_at)
    SELECT id, endpoint_id, 'claimed', 'processing', previous_state, attempts, cycle_attempts,
           statement_timestamp()
    FROM claimed
    RETURNING pg_notify('hymical_delivery_event', '')
)
SELECT c.id, c.claim_token, c.endpoint_id, c.destination_url, c.signing_secret,
       c.submission_id, c.attempts, c.cycle_attempts,
       (SELECT s.received_at FROM submissions s WHERE s.id = c.submission_id),
       (SELECT s.fields FROM submissions s WHERE s.id = c.submission_id)
FROM claimed c";

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
/// (late) inserts its attempt marked `late` and raises `attempts`, nothing else. Either way
/// the attempt's event is written by the same statement.
const RECORD_SQL: &str = "\
WITH locked AS MATERIALIZED (
    SELECT id, submission_id, attempts, state, (claim_token IS NOT DISTINCT FROM ?) AS owner
    FROM webhook_deliveries
    WHERE id = ?
    FOR UPDATE
), attempt AS (
    INSERT INTO delivery_attempts
        (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at,
         outcome, response_status, error, duration_ms, late)
    SELECT ?, id, submission_id, attempts + 1, ?, ?, ?, ?, ?, ?, NOT owner
    FROM locked
    RETURNING attempt_number, outcome
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
    RETURNING d.id, d.endpoint_id, d.state, d.attempts, d.cycle_attempts
), recorded_event AS (
    INSERT INTO delivery_events
        (delivery_id, endpoint_id, kind, state, previous_state, attempts, cycle_attempts,
         outcome, occurred_at)
    SELECT u.id, u.endpoint_id,
           CASE WHEN l.owner THEN 'attempt_recorded' ELSE 'late_attempt_recorded' END,
           u.state, l.state, u.attempts, u.cycle_attempts, (SELECT outcome FROM attempt),
           statement_timestamp()
    FROM updated u JOIN locked l ON l.id = u.id
    RETURNING pg_notify('hymical_delivery_event', '')
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
    use diesel_async::AsyncConnection;
    let (delivery_id, claim_token) = (delivery_id.to_string(), claim_token.to_string());
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let failed: Vec<String> = diesel::update(
                webhook_deliveries::table
                    .find(&delivery_id)
                    .filter(webhook_deliveries::claim_token.eq(&claim_token)),
            )
            .set((
                webhook_deliveries::state.eq("failed"),
                webhook_deliveries::claim_token.eq(None::<String>),
                webhook_deliveries::claim_expires_at.eq(None::<DateTime<Utc>>),
                webhook_deliveries::completed_at.eq(now),
            ))
            .returning(webhook_deliveries::id)
            .get_results(conn)
            .await?;
            super::events::record_changes(conn, &failed, "failed_without_attempt", "processing")
                .await?;
            Ok(!failed.is_empty())
        })
        .await?)
}

/// Gives back a claim whose request never started (shutdown), if this worker still holds
/// it: `pending` again, still due, counters untouched.
pub async fn hand_back(
    conn: &mut AsyncPgConnection,
    delivery_id: &str,
    claim_token: &str,
) -> Result<bool, DbError> {
    use diesel_async::AsyncConnection;
    let (delivery_id, claim_token) = (delivery_id.to_string(), claim_token.to_string());
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let handed_back: Vec<String> = diesel::update(
                webhook_deliveries::table
                    .find(&delivery_id)
                    .filter(webhook_deliveries::claim_token.eq(&claim_token)),
            )
            .set((
                webhook_deliveries::state.eq("pending"),
                webhook_deliveries::claim_token.eq(None::<String>),
                webhook_deliveries::claim_expires_at.eq(None::<DateTime<Utc>>),
            ))
            .returning(webhook_deliveries::id)
            .get_results(conn)
            .await?;
            super::events::record_changes(conn, &handed_back, "handed_back", "processing").await?;
            Ok(!handed_back.is_empty())
        })
        .await?)
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

/// The first `limit` deliveries (newest first) of each endpoint, in one statement.
pub async fn first_pages(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[String],
    limit: i64,
) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(diesel::sql_query(
        "SELECT d.id, d.submission_id, d.endpoint_id, d.destination_url, d.state, d.attempts,
                d.cycle_attempts, d.next_attempt_at, d.claim_expires_at, d.created_at, d.completed_at
         FROM unnest($1::text[]) AS e(id)
         CROSS JOIN LATERAL (
             SELECT * FROM webhook_deliveries w
             WHERE w.endpoint_id = e.id
             ORDER BY w.created_at DESC, w.id DESC
             LIMIT $2
         ) AS d",
    )
    .bind::<diesel::sql_types::Array<Text>, _>(endpoint_ids)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

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

/// Puts a failed delivery back in the queue in one conditional update: `pending`, due
/// now, a fresh cycle (`cycle_attempts = 0`), no claim, no completion. `attempts` and the
/// history stay, so numbering continues. Wakes the workers in the same transaction.
pub async fn replay(
    conn: &mut AsyncPgConnection,
    id: &str,
    now: DateTime<Utc>,
) -> Result<ReplayOutcome, DbError> {
    use diesel_async::AsyncConnection;
    let id = id.to_string();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let replayed: Option<DeliveryRow> = diesel::update(
                webhook_deliveries::table
                    .find(&id)
                    .filter(webhook_deliveries::state.eq("failed"))
                    .filter(webhook_deliveries::submission_id.is_not_null()),
            )
            .set(replay_changes(now))
            .returning(DeliveryRow::as_returning())
            .get_result(conn)
            .await
            .optional()?;
            if let Some(row) = replayed {
                super::events::record_changes(
                    conn,
                    std::slice::from_ref(&row.id),
                    "replayed",
                    "failed",
                )
                .await?;
                notify_due(conn).await?;
                return Ok(ReplayOutcome::Replayed(row));
            }
            let current: Option<(String, Option<String>)> = webhook_deliveries::table
                .find(&id)
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
        })
        .await?)
}

/// Which failed deliveries a bulk replay takes: exclusive bounds on `completed_at`.
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    pub endpoint_id: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
}

/// Replays every failed delivery matching the filter in one statement; returns how many.
pub async fn replay_matching(
    conn: &mut AsyncPgConnection,
    filter: &ReplayFilter,
    now: DateTime<Utc>,
) -> Result<usize, DbError> {
    use diesel_async::AsyncConnection;
    let filter = filter.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let mut query = diesel::update(webhook_deliveries::table)
                .filter(webhook_deliveries::state.eq("failed"))
                .filter(webhook_deliveries::submission_id.is_not_null())
                .into_boxed();
            if let Some(endpoint_id) = filter.endpoint_id {
                query = query.filter(webhook_deliveries::endpoint_id.eq(endpoint_id));
            }
            if let Some(after) = filter.failed_after {
                query = query.filter(webhook_deliveries::completed_at.gt(after));
            }
            if let Some(before) = filter.failed_before {
                query = query.filter(webhook_deliveries::completed_at.lt(before));
            }
            let replayed: Vec<String> = query
                .set(replay_changes(now))
                .returning(webhook_deliveries::id)
                .get_results(conn)
                .await?;
            if !replayed.is_empty() {
                super::events::record_changes(conn, &replayed, "replayed", "failed").await?;
                notify_due(conn).await?;
            }
            Ok(replayed.len())
        })
        .await?)
}

#[allow(clippy::type_complexity)]
fn replay_changes(
    now: DateTime<Utc>,
) -> (
    diesel::dsl::Eq<webhook_deliveries::state, &'static str>,
    diesel::dsl::Eq<webhook_deliveries::next_attempt_at, DateTime<Utc>>,
    diesel::dsl::Eq<webhook_deliveries::cycle_attempts, i32>,
    diesel::dsl::Eq<webhook_deliveries::claim_token, Option<String>>,
    diesel::dsl::Eq<webhook_deliveries::claim_expires_at, Option<DateTime<Utc>>>,
    diesel::dsl::Eq<webhook_deliveries::completed_at, Option<DateTime<Utc>>>,
) {
    (
        webhook_deliveries::state.eq("pending"),
        webhook_deliveries::next_attempt_at.eq(now),
        webhook_deliveries::cycle_attempts.eq(0),
        webhook_deliveries::claim_token.eq(None),
        webhook_deliveries::claim_expires_at.eq(None),
        webhook_deliveries::completed_at.eq(None),
    )
}

/// Wakes every worker; PostgreSQL delivers it when the transaction commits.
async fn notify_due(conn: &mut AsyncPgConnection) -> Result<(), diesel::result::Error> {
    diesel::sql_query("SELECT pg_notify($1, '')")
        .bind::<Text, _>(super::submissions::DELIVERY_DUE_CHANNEL)
        .execute(conn)
        .await?;
    Ok(())
}
