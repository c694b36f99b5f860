//! Storing submissions: the transactional outbox of public intake.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Json, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

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

#[derive(QueryableByName)]
struct InsertCounts {
    #[diesel(sql_type = BigInt)]
    submissions: i64,
    #[diesel(sql_type = BigInt)]
    deliveries: i64,
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
    let counts: InsertCounts = diesel::sql_query(
        "WITH new_submission AS (
             INSERT INTO submissions
                 (id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (endpoint_id, idempotency_key) DO NOTHING
             RETURNING id, endpoint_id, received_at
         ), new_delivery AS (
             INSERT INTO webhook_deliveries
                 (id, submission_id, endpoint_id, destination_url, signing_secret, state,
                  attempts, cycle_attempts, next_attempt_at, created_at)
             SELECT $7, s.id, s.endpoint_id, e.webhook_url, e.webhook_secret, 'pending',
                    0, 0, s.received_at, s.received_at
             FROM new_submission s
             JOIN endpoints e ON e.id = s.endpoint_id
             WHERE e.webhook_url IS NOT NULL
             RETURNING id
         )
         SELECT (SELECT count(*) FROM new_submission) AS submissions,
                (SELECT count(*) FROM new_delivery, LATERAL pg_notify($8, '') AS notified)
                    AS deliveries",
    )
    .bind::<Text, _>(submission.id)
    .bind::<Text, _>(submission.endpoint_id)
    .bind::<Timestamptz, _>(submission.received_at)
    .bind::<Json, _>(submission.fields)
    .bind::<Nullable<Text>, _>(key)
    .bind::<Nullable<Text>, _>(fingerprint)
    .bind::<Text, _>(submission.delivery_id)
    .bind::<Text, _>(DELIVERY_DUE_CHANNEL)
    .get_result(conn)
    .await?;
    Ok(if counts.submissions == 0 {
        InsertOutcome::KeyTaken
    } else {
        InsertOutcome::Stored {
            delivery_queued: counts.deliveries > 0,
        }
    })
}

/// The submission an idempotency key already names.
#[derive(Debug, Clone, QueryableByName)]
pub struct KeyedSubmission {
    #[diesel(sql_type = Text)]
    pub id: String,
    #[diesel(sql_type = Timestamptz)]
    pub received_at: DateTime<Utc>,
    #[diesel(sql_type = Json)]
    pub fields: serde_json::Value,
    #[diesel(sql_type = Text)]
    pub payload_fingerprint: String,
    #[diesel(sql_type = Bool)]
    pub delivery_queued: bool,
}

pub async fn find_by_idempotency_key(
    conn: &mut AsyncPgConnection,
    endpoint_id: &str,
    key: &str,
) -> Result<Option<KeyedSubmission>, DbError> {
    Ok(diesel::sql_query(
        "SELECT s.id, s.received_at, s.fields, s.payload_fingerprint,
                EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.submission_id = s.id)
                    AS delivery_queued
         FROM submissions s
         WHERE s.endpoint_id = $1 AND s.idempotency_key = $2",
    )
    .bind::<Text, _>(endpoint_id)
    .bind::<Text, _>(key)
    .get_result(conn)
    .await
    .optional()?)
}
