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
/// delivery id. The channel is `DELIVERY_DUE_CHANNEL`.
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
    RETURNING id
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
