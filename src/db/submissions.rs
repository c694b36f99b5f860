//! Storing submissions: the transactional outbox of public intake.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Json, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::prepared::{bind, PreparedSql};
use super::DbError;

/// The channel a worker listens on to hear that a delivery is due now.
pub const DELIVERY_DUE_CHANNEL: &str = "hymical_delivery_due";

pub struct NewSubmission<'a> {
    pub id: &'a str,
    pub endpoint_id: &'a str,
    pub received_at: DateTime<Utc>,
    /// The ordered `{"name": ["value", …], …}` object.
    pub fields: &'a serde_json::Value,
    /// The idempotency key and the payload fingerprint, together or not at all.
    pub idempotency: Option<(&'a str, &'a str)>,
    /// Used when the endpoint has a webhook at the moment of the insert.
    pub delivery_id: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Stored; `delivery_queued` tells whether a delivery row was written with it.
    Stored { delivery_queued: bool },
    /// Another submission already holds this idempotency key (a concurrent first request
    /// won the race); nothing was written.
    KeyTaken,
}

/// Writes the submission and, if the endpoint has a webhook, its delivery (URL and secret
/// copied from the endpoint row as it is now, due at once) in one statement, hence one
/// transaction: both rows or neither. The worker wake-up is sent in the same transaction,
/// so PostgreSQL delivers it only after the commit.
///
/// The unique constraint on (endpoint_id, idempotency_key) decides races between
/// concurrent first requests with one key: the loser inserts nothing and gets `KeyTaken`.
pub async fn insert_with_delivery(
    conn: &mut AsyncPgConnection,
    submission: &NewSubmission<'_>,
) -> Result<InsertOutcome, DbError> {
    let (key, fingerprint) = match submission.idempotency {
        Some((key, fingerprint)) => (Some(key), Some(fingerprint)),
        None => (None, None),
    };
    let query = PreparedSql::<OutboxInsert, (BigInt, BigInt), _>::new(
        OUTBOX_INSERT_SQL,
        (
            bind::<Text, _>(submission.id),
            bind::<Text, _>(submission.endpoint_id),
            bind::<Timestamptz, _>(submission.received_at),
            bind::<Json, _>(submission.fields),
            bind::<Nullable<Text>, _>(key),
            bind::<Nullable<Text>, _>(fingerprint),
            bind::<Text, _>(submission.delivery_id),
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

/// Identity of the outbox statement in the prepared-statement cache.
struct OutboxInsert;

/// Binds: submission id, endpoint id, received at, fields, idempotency key, fingerprint,
/// delivery id. The delivery's `created` event is written by the same statement; the one
/// notification, on `DELIVERY_DUE_CHANNEL`, wakes the workers and the event readers.
const OUTBOX_INSERT_SQL: &str = "\
WITH new_submission AS (
    INSERT INTO submissions
        (id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (endpoint_id, idempotency_key) DO NOTHING
    RETURNING id, endpoint_id, received_at
), new_delivery AS (
    INSERT INTO webhook_deliveries
        (id, submission_id, endpoint_id, destination_url, signing_secret, state,
         attempts, cycle_attempts, next_attempt_at, created_at)
    SELECT ?, s.id, s.endpoint_id, e.webhook_url, e.webhook_secret, 'pending',
           0, 0, s.received_at, s.received_at
    FROM new_submission s
    JOIN endpoints e ON e.id = s.endpoint_id
    WHERE e.webhook_url IS NOT NULL
    RETURNING id, endpoint_id
), created_event AS (
    INSERT INTO delivery_events
        (delivery_id, endpoint_id, kind, state, attempts, cycle_attempts, occurred_at)
    SELECT id, endpoint_id, 'created', 'pending', 0, 0, statement_timestamp()
    FROM new_delivery
)
SELECT (SELECT count(*) FROM new_submission),
       (SELECT count(*) FROM new_delivery, LATERAL pg_notify('hymical_delivery_due', '') AS notified)";

/// The submission an idempotency key already names.
#[derive(Debug, Clone, Queryable)]
pub struct KeyedSubmission {
    pub id: String,
    pub received_at: DateTime<Utc>,
    pub fields: serde_json::Value,
    pub payload_fingerprint: Option<String>,
    pub delivery_queued: bool,
}

pub async fn find_by_idempotency_key(
    conn: &mut AsyncPgConnection,
    endpoint_id: &str,
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_outbox_statement_notifies_the_delivery_channel() {
        assert!(super::OUTBOX_INSERT_SQL
            .contains(&format!("pg_notify('{}'", super::DELIVERY_DUE_CHANNEL)));
        assert_eq!(super::OUTBOX_INSERT_SQL.matches('?').count(), 7);
    }
}

/// A stored submission, as the management API reads it.
#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = super::schema::submissions)]
pub struct SubmissionRow {
    pub id: String,
    pub endpoint_id: String,
    pub received_at: DateTime<Utc>,
    pub fields: serde_json::Value,
    pub idempotency_key: Option<String>,
}

/// Filters of a submission listing: exclusive time bounds.
#[derive(Debug, Clone, Default)]
pub struct SubmissionFilter {
    pub endpoint_id: Option<String>,
    pub received_after: Option<DateTime<Utc>>,
    pub received_before: Option<DateTime<Utc>>,
}

pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[String],
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
        query = query.filter(super::keyset_before("received_at", "id", received_at, id));
    }
    Ok(query
        .order((submissions::received_at.desc(), submissions::id.desc()))
        .limit(limit)
        .load(conn)
        .await?)
}

/// The first `limit` submissions (newest first) of each endpoint, in one statement.
pub async fn first_pages(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[String],
    limit: i64,
) -> Result<Vec<SubmissionRow>, DbError> {
    Ok(diesel::sql_query(
        "SELECT s.id, s.endpoint_id, s.received_at, s.fields, s.idempotency_key
         FROM unnest($1::text[]) AS e(id)
         CROSS JOIN LATERAL (
             SELECT * FROM submissions x
             WHERE x.endpoint_id = e.id
             ORDER BY x.received_at DESC, x.id DESC
             LIMIT $2
         ) AS s",
    )
    .bind::<diesel::sql_types::Array<Text>, _>(endpoint_ids)
    .bind::<BigInt, _>(limit)
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
        state: String,
    },
}

/// Erases a submission unless its delivery is still owed. The delivery row is locked first,
/// so a replay running at the same moment either finishes before (and the erase is refused)
/// or finds the submission gone (and the replay is refused). Deliveries and attempts stay,
/// their `submission_id` set to null.
pub async fn erase(conn: &mut AsyncPgConnection, id: &str) -> Result<EraseOutcome, DbError> {
    use super::schema::{submissions, webhook_deliveries};
    use diesel_async::AsyncConnection;
    let id = id.to_string();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let state: Option<String> = webhook_deliveries::table
                .filter(webhook_deliveries::submission_id.eq(&id))
                .select(webhook_deliveries::state)
                .for_update()
                .first(conn)
                .await
                .optional()?;
            if let Some(state) = state.filter(|s| s == "pending" || s == "processing") {
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

/// Submissions received before `cutoff` that no delivery still needs: without a delivery,
/// or delivered. Failed deliveries may be replayed, so theirs are kept.
fn expired_ids(cutoff: DateTime<Utc>) -> String {
    format!(
        "SELECT s.id FROM submissions s
         LEFT JOIN webhook_deliveries d ON d.submission_id = s.id
         WHERE s.received_at < '{}' AND (d.id IS NULL OR d.state = 'delivered')",
        cutoff.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    )
}

/// How many submissions retention would delete now.
pub async fn count_expired(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
) -> Result<i64, DbError> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let count: Count = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM ({}) AS expired",
        expired_ids(cutoff)
    ))
    .get_result(conn)
    .await?;
    Ok(count.n)
}

/// Deletes up to `batch` expired submissions (see [`count_expired`]); returns how many.
/// Rows another process is deleting are skipped. Deliveries and attempts stay, their
/// `submission_id` set to null.
pub async fn delete_expired_batch(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
    batch: i64,
) -> Result<usize, DbError> {
    Ok(diesel::sql_query(format!(
        "DELETE FROM submissions WHERE id IN ({} LIMIT {batch} FOR UPDATE OF s SKIP LOCKED)",
        expired_ids(cutoff)
    ))
    .execute(conn)
    .await?)
}
