//! The rows the queries read and write, typed with the domain's vocabularies and ids (each
//! column is checked once, when it is read: an unknown state or a malformed id is an error).

use chrono::{DateTime, Utc};
use diesel::prelude::*;

use super::schema::{
    delivery_attempts, delivery_events, endpoint_events, endpoints, management_api_keys,
    submissions, webhook_deliveries,
};
use crate::model::ids::{ClaimToken, DeliveryId, EndpointId, KeyId, SubmissionId};
use crate::model::state::{
    AttemptOutcome, DeliveryState, EndpointEventKind, EventKind, KeyRole, PauseReason,
};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = endpoints)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct EndpointRow {
    pub id: EndpointId,
    pub name: String,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
    pub redirect_url: Option<String>,
    /// The column is `text[]` with a CHECK against NULL elements; Diesel's generated type
    /// still admits them, so they are skipped on read.
    pub allowed_origins: Vec<Option<String>>,
    pub honeypot_field: Option<String>,
    /// The secret a rotation replaced; live (signing beside the current one) until
    /// `previous_secret_expires_at`.
    pub previous_webhook_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// Set while its deliveries are paused, with why.
    pub paused_at: Option<DateTime<Utc>>,
    pub pause_reason: Option<PauseReason>,
    /// Its deliveries that ended `failed` since the last one delivered.
    pub consecutive_failed_deliveries: i32,
    /// Set when it was deleted with its history kept: the row is a tombstone.
    pub deleted_at: Option<DateTime<Utc>>,
}

impl EndpointRow {
    /// A new, active endpoint with no webhook and no browser options.
    pub fn new(id: EndpointId, name: String, created_at: DateTime<Utc>) -> EndpointRow {
        EndpointRow {
            id,
            name,
            is_active: true,
            created_at,
            webhook_url: None,
            webhook_secret: None,
            redirect_url: None,
            allowed_origins: Vec::new(),
            honeypot_field: None,
            previous_webhook_secret: None,
            previous_secret_expires_at: None,
            paused_at: None,
            pause_reason: None,
            consecutive_failed_deliveries: 0,
            deleted_at: None,
        }
    }

    /// The previous secret while it is still live at `now`.
    pub fn live_previous_secret(&self, now: DateTime<Utc>) -> Option<&str> {
        match (
            &self.previous_webhook_secret,
            self.previous_secret_expires_at,
        ) {
            (Some(secret), Some(until)) if until > now => Some(secret),
            _ => None,
        }
    }

    pub fn allowed_origins(&self) -> impl Iterator<Item = &str> {
        self.allowed_origins.iter().flatten().map(String::as_str)
    }

    pub fn has_webhook(&self) -> bool {
        self.webhook_url.is_some()
    }
}

/// A stored submission, as the management API reads it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = submissions)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct SubmissionRow {
    pub id: SubmissionId,
    pub endpoint_id: EndpointId,
    pub received_at: DateTime<Utc>,
    pub fields: serde_json::Value,
    pub idempotency_key: Option<String>,
}

/// The submission an idempotency key already names.
#[derive(Debug, Clone, Queryable)]
pub struct KeyedSubmission {
    pub id: SubmissionId,
    pub received_at: DateTime<Utc>,
    pub fields: serde_json::Value,
    pub payload_fingerprint: Option<String>,
    pub delivery_queued: bool,
}

/// A delivery as the management API reads it: every column but the signing secret.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhook_deliveries)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct DeliveryRow {
    pub id: DeliveryId,
    pub submission_id: Option<SubmissionId>,
    pub endpoint_id: EndpointId,
    pub destination_url: String,
    pub state: DeliveryState,
    pub attempts: i32,
    pub cycle_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub claim_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// The SQL types of a [`DeliveryRow`], in its column order, for hand-written statements.
pub type DeliveryRowSql = (
    diesel::sql_types::Text,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Text,
    diesel::sql_types::Text,
    diesel::sql_types::Text,
    diesel::sql_types::Integer,
    diesel::sql_types::Integer,
    diesel::sql_types::Timestamptz,
    diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>,
    diesel::sql_types::Timestamptz,
    diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>,
);

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = delivery_attempts)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct AttemptRow {
    pub delivery_id: DeliveryId,
    pub attempt_number: i32,
    pub attempted_at: DateTime<Utc>,
    pub outcome: AttemptOutcome,
    pub response_status: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i32,
    pub late: bool,
}

/// A delivery a worker now holds, with what it needs to send it.
#[derive(Debug, Clone, Queryable)]
pub struct ClaimedDelivery {
    pub id: DeliveryId,
    pub claim_token: ClaimToken,
    pub endpoint_id: EndpointId,
    pub destination_url: String,
    pub signing_secret: String,
    pub submission_id: Option<SubmissionId>,
    /// Requests since the delivery last entered the queue: the owner's next state is
    /// decided from it.
    pub cycle_attempts: i32,
    /// The submission's time and fields; `None` when the submission was erased.
    pub received_at: Option<DateTime<Utc>>,
    pub fields: Option<serde_json::Value>,
    /// The endpoint's own secrets now, when the delivery goes to the endpoint's current
    /// URL: the current one and a rotated-out one still in its overlap window. They sign
    /// `webhook-signature` (the snapshot does when there are none).
    pub endpoint_secret: Option<String>,
    pub endpoint_previous_secret: Option<String>,
    /// The endpoint's run of failed deliveries when this was claimed (a delivery resets a
    /// nonzero one).
    pub endpoint_failed_deliveries: i32,
}

impl ClaimedDelivery {
    /// What identifies the claim: the delivery and the token it holds.
    pub fn claim(&self) -> (&DeliveryId, &ClaimToken) {
        (&self.id, &self.claim_token)
    }
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = management_api_keys)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct ManagementKeyRow {
    pub id: KeyId,
    pub name: String,
    pub display_prefix: String,
    pub key_digest: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub role: KeyRole,
}

/// An event, with the delivery it is about as it was when the event was read: subscribers
/// show both, and reading them together costs one join instead of a query per event.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = delivery_events)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct EventRow {
    pub id: i64,
    pub delivery_id: DeliveryId,
    pub endpoint_id: EndpointId,
    pub kind: EventKind,
    pub state: DeliveryState,
    pub previous_state: Option<DeliveryState>,
    pub attempts: i32,
    pub cycle_attempts: i32,
    pub outcome: Option<AttemptOutcome>,
    pub occurred_at: DateTime<Utc>,
    #[diesel(embed)]
    pub delivery: DeliveryRow,
}

/// The SQL types of an [`EventRow`], in its column order, for hand-written statements.
pub type EventRowSql = (
    diesel::sql_types::BigInt,
    diesel::sql_types::Text,
    diesel::sql_types::Text,
    diesel::sql_types::Text,
    diesel::sql_types::Text,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Integer,
    diesel::sql_types::Integer,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Timestamptz,
    DeliveryRowSql,
);

/// One change of an endpoint's state, as subscribers get it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = endpoint_events)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct EndpointEventRow {
    pub id: i64,
    pub endpoint_id: EndpointId,
    pub kind: EndpointEventKind,
    pub reason: Option<PauseReason>,
    pub occurred_at: DateTime<Utc>,
}
