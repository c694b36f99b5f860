//! The object types of the schema. Field values appear only in `Submission.fields`;
//! signing secrets never appear here.

use async_graphql::connection::Connection;
use async_graphql::{
    Context, InputValueError, InputValueResult, Object, Result, Scalar, ScalarType, SimpleObject,
    Value, ID,
};
use chrono::{DateTime, Utc};

use super::listing;
use super::loaders::Loaders;
use super::{app, ResultExt};
use crate::clock::format_timestamp;
use crate::db;
use crate::db::models::{AttemptRow, DeliveryRow, EndpointRow, SubmissionRow};
use crate::model::ids::EndpointId;
pub use crate::model::state::{
    AttemptOutcome, DeliveryState, EndpointEventKind, KeyRole, PauseReason,
};

/// RFC 3339 in UTC with six fractional digits and `Z`, like every time the service shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp(pub DateTime<Utc>);

#[Scalar(name = "DateTime")]
impl ScalarType for Timestamp {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(text) => DateTime::parse_from_rfc3339(text)
                .map(|time| Timestamp(time.with_timezone(&Utc)))
                .map_err(|_| {
                    InputValueError::custom(
                        "expected an RFC 3339 date-time, such as 2026-08-24T14:34:27.651841Z",
                    )
                }),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        Value::String(format_timestamp(self.0))
    }
}

pub struct Endpoint(pub EndpointRow);

impl Endpoint {
    /// The endpoint with this id, through the request's loader (every endpoint a response
    /// names loads in one query); `None` once erased.
    pub async fn load(ctx: &Context<'_>, id: &EndpointId) -> Result<Option<Endpoint>> {
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .endpoints
            .load_one(id.clone())
            .await
            .gql()?
            .map(Endpoint))
    }
}

#[Object]
impl Endpoint {
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn is_active(&self) -> bool {
        self.0.is_active
    }
    async fn created_at(&self) -> Timestamp {
        Timestamp(self.0.created_at)
    }
    async fn webhook_url(&self) -> Option<&str> {
        self.0.webhook_url.as_deref()
    }
    async fn redirect_url(&self) -> Option<&str> {
        self.0.redirect_url.as_deref()
    }
    async fn allowed_origins(&self) -> Vec<&str> {
        self.0.allowed_origins().collect()
    }
    async fn honeypot_field(&self) -> Option<&str> {
        self.0.honeypot_field.as_deref()
    }

    /// Whether its deliveries go out (`RUNNING`), are held (`PAUSED`: see `pauseReason`
    /// and `pausedAt`), or it was deleted with its history kept (`DELETED`).
    async fn delivery_state(&self) -> EndpointDeliveryState {
        if self.0.deleted_at.is_some() {
            EndpointDeliveryState::Deleted
        } else if self.0.paused_at.is_some() {
            EndpointDeliveryState::Paused
        } else {
            EndpointDeliveryState::Running
        }
    }
    /// Why its deliveries are paused; null unless they are.
    async fn pause_reason(&self) -> Option<PauseReason> {
        self.0.pause_reason
    }
    /// Since when its deliveries are paused; null unless they are.
    async fn paused_at(&self) -> Option<Timestamp> {
        self.0.paused_at.map(Timestamp)
    }
    /// Its deliveries that ended failed since the last one was delivered (the run that
    /// pauses it at `FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES`).
    async fn consecutive_failed_deliveries(&self) -> i32 {
        self.0.consecutive_failed_deliveries
    }
    /// When it was deleted with its history kept; null otherwise.
    async fn deleted_at(&self) -> Option<Timestamp> {
        self.0.deleted_at.map(Timestamp)
    }
    /// The signing secrets live now, never the secrets themselves: the current one, and
    /// the one a rotation replaced while its overlap lasts. Empty without a webhook.
    async fn webhook_secrets(&self, ctx: &Context<'_>) -> Vec<WebhookSecret> {
        let now = app(ctx).clock.now();
        let mut live = Vec::new();
        if let Some(current) = &self.0.webhook_secret {
            live.push(WebhookSecret::new(
                current,
                WebhookSecretRole::Current,
                None,
            ));
        }
        if let (Some(previous), Some(until)) = (
            self.0.live_previous_secret(now),
            self.0.previous_secret_expires_at,
        ) {
            live.push(WebhookSecret::new(
                previous,
                WebhookSecretRole::Previous,
                Some(until),
            ));
        }
        live
    }

    /// This endpoint's submissions, newest first.
    #[graphql(complexity = "super::pagination::page_complexity(first, child_complexity)")]
    async fn submissions(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, Submission>> {
        listing::endpoint_page::<listing::Submissions>(ctx, &self.0.id, first, after).await
    }

    /// How many of this endpoint's deliveries are in each state.
    async fn delivery_counts(&self, ctx: &Context<'_>) -> Result<DeliveryCounts> {
        let loaders = ctx.data_unchecked::<Loaders>();
        let counts = loaders
            .delivery_counts
            .load_one(self.0.id.clone())
            .await
            .gql()?
            .unwrap_or_default();
        Ok(DeliveryCounts(counts))
    }

    /// This endpoint's deliveries, newest first.
    #[graphql(complexity = "super::pagination::page_complexity(first, child_complexity)")]
    async fn deliveries(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, Delivery>> {
        listing::endpoint_page::<listing::Deliveries>(ctx, &self.0.id, first, after).await
    }
}

/// One field of a submission: its name and its values in submission order.
#[derive(SimpleObject)]
pub struct Field {
    name: String,
    values: Vec<String>,
}

pub struct Submission(pub SubmissionRow);

#[Object]
impl Submission {
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn endpoint(&self, ctx: &Context<'_>) -> Result<Option<Endpoint>> {
        Endpoint::load(ctx, &self.0.endpoint_id).await
    }
    async fn received_at(&self) -> Timestamp {
        Timestamp(self.0.received_at)
    }
    /// How many values were submitted, counted one by one.
    async fn field_count(&self) -> usize {
        crate::model::fields::count_stored_values(&self.0.fields)
    }
    /// Whether it was sent with an `Idempotency-Key` (the key itself is never shown).
    async fn idempotent(&self) -> bool {
        self.0.idempotency_key.is_some()
    }
    /// The submitted fields in stored order: the only place field values are returned.
    async fn fields(&self) -> Vec<Field> {
        self.0
            .fields
            .as_object()
            .map(|object| {
                object
                    .iter()
                    .map(|(name, values)| Field {
                        name: name.clone(),
                        values: values
                            .as_array()
                            .map(|values| {
                                values
                                    .iter()
                                    .filter_map(|v| v.as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    async fn delivery(&self, ctx: &Context<'_>) -> Result<Option<Delivery>> {
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .delivery_by_submission
            .load_one(self.0.id.clone())
            .await
            .gql()?
            .flatten()
            .map(Delivery))
    }
}

pub struct Delivery(pub DeliveryRow);

#[Object]
impl Delivery {
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn state(&self) -> DeliveryState {
        self.0.state
    }
    /// Null once the submission was erased.
    async fn submission(&self, ctx: &Context<'_>) -> Result<Option<Submission>> {
        let Some(id) = &self.0.submission_id else {
            return Ok(None);
        };
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .submissions
            .load_one(id.clone())
            .await
            .gql()?
            .map(Submission))
    }
    async fn endpoint(&self, ctx: &Context<'_>) -> Result<Option<Endpoint>> {
        Endpoint::load(ctx, &self.0.endpoint_id).await
    }
    /// The URL captured when the submission was accepted.
    async fn destination_url(&self) -> &str {
        &self.0.destination_url
    }
    /// Requests this delivery ever produced.
    async fn attempts(&self) -> i32 {
        self.0.attempts
    }
    /// Requests since it last entered the queue (the retry allowance is measured on this).
    async fn cycle_attempts(&self) -> i32 {
        self.0.cycle_attempts
    }
    async fn next_attempt_at(&self) -> Timestamp {
        Timestamp(self.0.next_attempt_at)
    }
    async fn claim_expires_at(&self) -> Option<Timestamp> {
        self.0.claim_expires_at.map(Timestamp)
    }
    async fn created_at(&self) -> Timestamp {
        Timestamp(self.0.created_at)
    }
    async fn completed_at(&self) -> Option<Timestamp> {
        self.0.completed_at.map(Timestamp)
    }
    /// Every request that went out, in number order, late ones included.
    #[graphql(complexity = "ATTEMPTS_COUNTED.saturating_mul(child_complexity) + 1")]
    async fn attempt_history(&self, ctx: &Context<'_>) -> Result<Vec<DeliveryAttempt>> {
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .attempts
            .load_one(self.0.id.clone())
            .await
            .gql()?
            .unwrap_or_default()
            .into_iter()
            .map(DeliveryAttempt)
            .collect())
    }
}

/// The attempts a history is counted as holding when a document's complexity is measured:
/// the default `FORMS_WEBHOOK_MAX_ATTEMPTS` (a history is loaded for a whole page at once,
/// so this prices the answer's size, not queries).
const ATTEMPTS_COUNTED: usize = 5;

pub struct DeliveryAttempt(pub AttemptRow);

#[Object]
impl DeliveryAttempt {
    async fn number(&self) -> i32 {
        self.0.attempt_number
    }
    /// When the request started.
    async fn attempted_at(&self) -> Timestamp {
        Timestamp(self.0.attempted_at)
    }
    async fn outcome(&self) -> AttemptOutcome {
        self.0.outcome
    }
    async fn http_status(&self) -> Option<i32> {
        self.0.response_status
    }
    /// The kind of failure; never a response body.
    async fn error(&self) -> Option<&str> {
        self.0.error.as_deref()
    }
    async fn duration_ms(&self) -> i32 {
        self.0.duration_ms
    }
    /// Recorded by a worker whose claim had been superseded.
    async fn late(&self) -> bool {
        self.0.late
    }
}

/// How many deliveries are in each state.
pub struct DeliveryCounts(pub db::deliveries::DeliveryCounts);

#[Object]
impl DeliveryCounts {
    async fn pending(&self) -> i64 {
        self.0.pending
    }
    async fn processing(&self) -> i64 {
        self.0.processing
    }
    async fn delivered(&self) -> i64 {
        self.0.delivered
    }
    async fn failed(&self) -> i64 {
        self.0.failed
    }
}

/// A management key, described (the key itself is shown once, when made).
#[derive(SimpleObject)]
pub struct ApiKey {
    pub id: ID,
    pub name: String,
    /// `ADMIN`: everything. `READ`: queries and subscriptions only; every mutation and
    /// export is refused with `INSUFFICIENT_ROLE`.
    pub role: KeyRole,
}

/// One minute of deliveries ending.
#[derive(SimpleObject)]
pub struct DeliveryActivityMinute {
    /// The minute's start.
    pub minute: Timestamp,
    /// Deliveries that reached `DELIVERED` in it.
    pub delivered: i64,
    /// Deliveries that reached `FAILED` in it.
    pub failed: i64,
}

#[derive(SimpleObject)]
pub struct EndpointSecretPayload {
    pub endpoint: Endpoint,
    /// The signing secret, only when this mutation made a new one; never shown again.
    pub webhook_secret: Option<String>,
}

/// Where an endpoint's deliveries stand.
#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointDeliveryState {
    Running,
    Paused,
    Deleted,
}

#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookSecretRole {
    /// Signs `Hymical-Signature` of deliveries accepted since it was made, and
    /// `webhook-signature` of every delivery to the endpoint's current URL.
    Current,
    /// Replaced by a rotation; still signs `webhook-signature` beside the current one
    /// until `liveUntil`.
    Previous,
}

/// A live signing secret, described (the secret itself is shown once, when made).
#[derive(SimpleObject)]
pub struct WebhookSecret {
    pub role: WebhookSecretRole,
    /// The first 8 hex digits of the SHA-256 of the whole secret string (`whsec_…`), so
    /// a receiver can tell which one it holds.
    pub fingerprint: String,
    /// When it stops signing; null for the current one.
    pub live_until: Option<Timestamp>,
}

impl WebhookSecret {
    fn new(secret: &str, role: WebhookSecretRole, until: Option<DateTime<Utc>>) -> Self {
        WebhookSecret {
            role,
            fingerprint: crate::digest::sha256_hex(secret.as_bytes())[..8].to_string(),
            live_until: until.map(Timestamp),
        }
    }
}

#[derive(SimpleObject)]
pub struct EndpointPayload {
    pub endpoint: Endpoint,
}

#[derive(SimpleObject)]
pub struct ResumeEndpointPayload {
    pub endpoint: Endpoint,
    /// Its deliveries that were owed when it resumed (pending, now due, or processing:
    /// in flight or with a lapsed claim, claimable again).
    pub held_deliveries: i32,
}

/// What becomes of a deleted endpoint's submissions, deliveries and their histories.
#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointHistory {
    /// All of it stays, readable through the API; the endpoint stays as a tombstone
    /// (`deliveryState: DELETED`), so its id cannot be taken by a new endpoint.
    Keep,
    /// All of it is erased with the endpoint, and its id is free again.
    Erase,
}

#[derive(SimpleObject)]
pub struct DeleteEndpointPayload {
    pub deleted_endpoint_id: ID,
    pub history: EndpointHistory,
    /// Deliveries still owed that were cancelled (ended `FAILED`, a `CANCELLED` event each).
    pub cancelled_deliveries: i32,
}

/// One change of an endpoint's state.
pub struct EndpointEvent(pub db::models::EndpointEventRow);

#[Object]
impl EndpointEvent {
    /// Ordered: a later event has a larger id. Pass the last one received as
    /// `afterEventId` to resume.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn endpoint_id(&self) -> ID {
        ID(self.0.endpoint_id.to_string())
    }
    async fn kind(&self) -> EndpointEventKind {
        self.0.kind
    }
    /// Why, for `PAUSED`.
    async fn reason(&self) -> Option<PauseReason> {
        self.0.reason
    }
    async fn occurred_at(&self) -> Timestamp {
        Timestamp(self.0.occurred_at)
    }
    /// The endpoint as it is when the event is sent; null once erased. (A subscription's
    /// loaders keep no cache: each event reads it as it is then.)
    async fn endpoint(&self, ctx: &Context<'_>) -> Result<Option<Endpoint>> {
        Endpoint::load(ctx, &self.0.endpoint_id).await
    }
}

#[derive(SimpleObject)]
pub struct ReplayDeliveryPayload {
    pub delivery: Delivery,
}

#[derive(SimpleObject)]
pub struct ReplayDeliveriesPayload {
    /// How many failed deliveries were put back in the queue (with `dryRun`: would be).
    pub count: i32,
}

#[derive(SimpleObject)]
pub struct DeleteSubmissionPayload {
    pub deleted_submission_id: ID,
}
