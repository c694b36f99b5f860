//! Storing submissions: the transactional outbox of public intake.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Json, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{KeyedSubmission, SubmissionRow};
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::{DeliveryId, EndpointId, SubmissionId};
use crate::model::state::DeliveryState;

pub struct NewSubmission<'a> {
    pub id: &'a SubmissionId,
    pub endpoint_id: &'a EndpointId,
    pub received_at: DateTime<Utc>,
    /// The ordered `{"name": ["value", …], …}` object.
    pub fields: &'a serde_json::Value,
    /// The idempotency key and the payload fingerprint, together or not at all.
    pub idempotency: Option<(&'a str, &'a str)>,
    /// Used when the endpoint has a webhook at the moment of the insert.
    pub delivery_id: &'a DeliveryId,
    /// The time the new delivery's due time is judged by (`None`: the database's clock).
    pub now: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Stored; `delivery_queued` tells whether a delivery row was written with it.
    Stored { delivery_queued: bool },
    /// Another submission already holds this idempotency key (a concurrent first request
    /// won the race); nothing was written.
    KeyTaken,
}

/// Public for the benchmarks, which run it through pgbench.
pub static OUTBOX_INSERT: SqlText = sql!("outbox_insert.sql", with_events);
struct OutboxInsert;

/// Writes the submission and, if the endpoint has a webhook, its delivery in one statement
/// (outbox_insert.sql). `KeyTaken` when a concurrent first request with the same
/// idempotency key won the race: nothing was written.
pub async fn insert_with_delivery(
    conn: &mut AsyncPgConnection,
    submission: &NewSubmission<'_>,
) -> Result<InsertOutcome, DbError> {
    let (key, fingerprint) = match submission.idempotency {
        Some((key, fingerprint)) => (Some(key), Some(fingerprint)),
        None => (None, None),
    };
    let query = Statement::<OutboxInsert, (BigInt, BigInt), _>::new(
        &OUTBOX_INSERT,
        (
            bind::<Text, _>(submission.id),
            bind::<Text, _>(submission.endpoint_id),
            bind::<Timestamptz, _>(submission.received_at),
            bind::<Json, _>(submission.fields),
            bind::<Nullable<Text>, _>(key),
            bind::<Nullable<Text>, _>(fingerprint),
            bind::<Text, _>(submission.delivery_id),
            bind::<Nullable<Timestamptz>, _>(submission.now),
        ),
    );
    let (submissions, deliveries): (i64, i64) = query.get_result(conn).await?;
    Ok(if submissions == 0 {
        InsertOutcome::KeyTaken
    } else {
        InsertOutcome::Stored {
            delivery_queued: deliveries > 0,
        }
    })
}

pub async fn find_by_idempotency_key(
    conn: &mut AsyncPgConnection,
    endpoint_id: &EndpointId,
    key: &str,
) -> Result<Option<KeyedSubmission>, DbError> {
    use super::schema::{submissions, webhook_deliveries};
    let has_delivery = diesel::dsl::exists(
        webhook_deliveries::table
            .filter(webhook_deliveries::submission_id.eq(submissions::id.nullable())),
    );
    Ok(submissions::table
        .filter(submissions::endpoint_id.eq(endpoint_id))
        .filter(submissions::idempotency_key.eq(key))
        .select((
            submissions::id,
            submissions::received_at,
            submissions::fields,
            submissions::payload_fingerprint,
            has_delivery,
        ))
        .first(conn)
        .await
        .optional()?)
}

/// Filters of a submission listing: exclusive time bounds.
#[derive(Debug, Clone, Default)]
pub struct SubmissionFilter {
    pub endpoint_id: Option<EndpointId>,
    pub received_after: Option<DateTime<Utc>>,
    pub received_before: Option<DateTime<Utc>>,
}

impl SubmissionFilter {
    /// A filter no submission matches (an empty time range).
    pub fn nothing() -> SubmissionFilter {
        SubmissionFilter {
            endpoint_id: None,
            received_after: Some(DateTime::<Utc>::UNIX_EPOCH),
            received_before: Some(DateTime::<Utc>::UNIX_EPOCH),
        }
    }
}

pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[SubmissionId],
) -> Result<Vec<SubmissionRow>, DbError> {
    use super::schema::submissions;
    Ok(submissions::table
        .filter(submissions::id.eq_any(ids))
        .select(SubmissionRow::as_select())
        .load(conn)
        .await?)
}

/// Newest first; `after` is the (received_at, id) of the last row of the previous page.
pub async fn page(
    conn: &mut AsyncPgConnection,
    filter: &SubmissionFilter,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
) -> Result<Vec<SubmissionRow>, DbError> {
    use super::schema::submissions;
    let mut query = filtered(filter).select(SubmissionRow::as_select());
    if let Some((received_at, id)) = after {
        query = query.filter(super::keyset::before(
            submissions::received_at,
            submissions::id,
            received_at,
            id,
        ));
    }
    Ok(query
        .order((submissions::received_at.desc(), submissions::id.desc()))
        .limit(limit)
        .load(conn)
        .await?)
}

static SUBMISSIONS_FIRST_PAGES: SqlText = sql!("submissions_first_pages.sql");
struct SubmissionsFirstPages;

/// The first `limit` submissions (newest first) of each endpoint, in one statement.
pub async fn first_pages(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[EndpointId],
    limit: i64,
) -> Result<Vec<SubmissionRow>, DbError> {
    Ok(Statement::<
        SubmissionsFirstPages,
        (Text, Text, Timestamptz, Json, Nullable<Text>),
        _,
    >::new(
        &SUBMISSIONS_FIRST_PAGES,
        (
            bind::<diesel::sql_types::Array<Text>, _>(endpoint_ids),
            bind::<BigInt, _>(limit),
        ),
    )
    .load(conn)
    .await?)
}

/// What erasing a submission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EraseOutcome {
    Erased,
    NotFound,
    /// Its delivery is still owed (`pending` or `processing`): nothing was erased.
    DeliveryInProgress {
        state: DeliveryState,
    },
}

/// Erases a submission unless its delivery is still owed. The delivery row is locked first,
/// so a replay running at the same moment either finishes before (and the erase is refused)
/// or finds the submission gone (and the replay is refused). Deliveries and attempts stay,
/// their `submission_id` set to null.
pub async fn erase(
    conn: &mut AsyncPgConnection,
    id: &SubmissionId,
) -> Result<EraseOutcome, DbError> {
    use super::schema::{submissions, webhook_deliveries};
    use diesel_async::AsyncConnection;
    let id = id.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let state: Option<DeliveryState> = webhook_deliveries::table
                .filter(webhook_deliveries::submission_id.eq(&id))
                .select(webhook_deliveries::state)
                .for_update()
                .first(conn)
                .await
                .optional()?;
            if let Some(state) = state.filter(|state| !state.is_terminal()) {
                return Ok(EraseOutcome::DeliveryInProgress { state });
            }
            let deleted = diesel::delete(submissions::table.find(&id))
                .execute(conn)
                .await?;
            Ok(if deleted == 1 {
                EraseOutcome::Erased
            } else {
                EraseOutcome::NotFound
            })
        })
        .await?)
}

/// How many submissions a listing with this filter holds.
pub async fn count(
    conn: &mut AsyncPgConnection,
    filter: &SubmissionFilter,
) -> Result<i64, DbError> {
    Ok(filtered(filter).count().get_result(conn).await?)
}

/// The submissions a filter selects, for listing or counting.
fn filtered<'a>(
    filter: &SubmissionFilter,
) -> super::schema::submissions::BoxedQuery<'a, diesel::pg::Pg> {
    use super::schema::submissions;
    let mut query = submissions::table.into_boxed();
    if let Some(endpoint_id) = &filter.endpoint_id {
        query = query.filter(submissions::endpoint_id.eq(endpoint_id.clone()));
    }
    if let Some(after) = filter.received_after {
        query = query.filter(submissions::received_at.gt(after));
    }
    if let Some(before) = filter.received_before {
        query = query.filter(submissions::received_at.lt(before));
    }
    query
}

static RETENTION_COUNT: SqlText = sql!("retention_count.sql");
struct RetentionCount;

/// How many submissions retention would delete now (retention_count.sql).
pub async fn count_expired(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
) -> Result<i64, DbError> {
    Ok(Statement::<RetentionCount, BigInt, _>::new(
        &RETENTION_COUNT,
        (bind::<Timestamptz, _>(cutoff),),
    )
    .get_result(conn)
    .await?)
}

static RETENTION_DELETE: SqlText = sql!("retention_delete.sql");
struct RetentionDelete;

/// Deletes up to `batch` expired submissions (retention_delete.sql); returns how many.
pub async fn delete_expired_batch(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
    batch: i64,
) -> Result<usize, DbError> {
    let deleted: i64 = Statement::<RetentionDelete, BigInt, _>::new(
        &RETENTION_DELETE,
        (bind::<Timestamptz, _>(cutoff), bind::<BigInt, _>(batch)),
    )
    .get_result(conn)
    .await?;
    Ok(usize::try_from(deleted).unwrap_or(0))
}
