//! The object types of the schema. Field values appear only in `Submission.fields`;
//! signing secrets never appear here.

use async_graphql::connection::Connection;
use async_graphql::{Context, Object, SimpleObject, ID};

use super::app;
pub use super::destination::Destination;
use super::destination::{live_secrets, WebhookSecret};
use super::error::Result;
use super::listing;
use super::loaders::{prime_deliveries, prime_submissions, LoadError, Loaders};
use super::pagination::Position;
pub use super::timestamp::Timestamp;
use std::future::Future;

use async_graphql::dataloader::{DataLoader, HashMapCache};
use async_graphql::Lookahead;
use diesel_async::AsyncPgConnection;

use crate::db;
use crate::db::deliveries::DeliveryFilter;
use crate::db::models::{AttemptRow, DeliveryRow, DestinationRow, EndpointRow, SubmissionRow};
use crate::db::submissions::SubmissionFilter;
use crate::db::DbError;
use crate::model::ids::EndpointId;
pub use crate::model::state::{
    AttemptOutcome, DeliveryState, DestinationKind, EndpointEventKind, PauseReason,
};

pub struct Endpoint {
    pub row: EndpointRow,
    /// Its destinations (not removed, in order), when whoever made this knows them as they
    /// are now (a mutation's answer); otherwise read through the request's loader.
    known_destinations: Option<Vec<DestinationRow>>,
}

impl Endpoint {
    pub fn new(row: EndpointRow) -> Endpoint {
        Endpoint {
            row,
            known_destinations: None,
        }
    }

    /// An endpoint with its destinations as the caller just read them.
    pub fn with_destinations(row: EndpointRow, destinations: Vec<DestinationRow>) -> Endpoint {
        Endpoint {
            row,
            known_destinations: Some(destinations),
        }
    }

    /// The endpoint with this id, through the request's loader (every endpoint a response
    /// names loads in one query); `None` once erased.
    pub async fn load(ctx: &Context<'_>, id: &EndpointId) -> Result<Option<Endpoint>> {
        let loaders = ctx.data_unchecked::<Loaders>();
        let Some(row) = loaders.endpoints.load_one(id.clone()).await? else {
            return Ok(None);
        };
        // Another project's endpoint is answered as an unknown one.
        Ok(super::visibility::sees(ctx, &row.project_id).then(|| Endpoint::new(row)))
    }

    /// Its destinations not removed, in order.
    async fn destination_rows(&self, ctx: &Context<'_>) -> Result<Vec<DestinationRow>> {
        if let Some(known) = &self.known_destinations {
            return Ok(known.clone());
        }
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .destinations_of_endpoint
            .load_one(self.row.id.clone())
            .await?
            .unwrap_or_default())
    }

    /// What the endpoint-wide fields of the single-webhook API describe: its first webhook
    /// destination, or its first destination when it has no webhook.
    async fn primary(&self, ctx: &Context<'_>) -> Result<Option<DestinationRow>> {
        let destinations = self.destination_rows(ctx).await?;
        Ok(destinations
            .iter()
            .find(|d| d.kind == DestinationKind::Webhook)
            .or(destinations.first())
            .cloned())
    }

    async fn first_webhook(&self, ctx: &Context<'_>) -> Result<Option<DestinationRow>> {
        Ok(self
            .destination_rows(ctx)
            .await?
            .into_iter()
            .find(|d| d.kind == DestinationKind::Webhook))
    }
}

#[Object]
impl Endpoint {
    async fn id(&self) -> ID {
        ID(self.row.id.to_string())
    }
    async fn name(&self) -> &str {
        &self.row.name
    }
    /// The project it belongs to, for ever.
    async fn project_id(&self) -> ID {
        ID(self.row.project_id.to_string())
    }
    async fn is_active(&self) -> bool {
        self.row.is_active
    }
    async fn created_at(&self) -> Timestamp {
        Timestamp(self.row.created_at)
    }
    /// Its first webhook destination's URL; null without one.
    async fn webhook_url(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        Ok(self.first_webhook(ctx).await?.and_then(|d| d.url))
    }
    async fn redirect_url(&self) -> Option<&str> {
        self.row.redirect_url.as_deref()
    }
    async fn allowed_origins(&self) -> Vec<&str> {
        self.row.allowed_origins().collect()
    }
    async fn honeypot_field(&self) -> Option<&str> {
        self.row.honeypot_field.as_deref()
    }
    /// Days its submissions are kept (0: for ever); null: the server's
    /// (`FORMS_SUBMISSION_RETENTION_DAYS`).
    async fn retention_days(&self) -> Option<i32> {
        self.row.retention_days
    }
    /// Days its spam is kept (0: for ever); null: the server's
    /// (`FORMS_SPAM_RETENTION_DAYS`).
    async fn spam_retention_days(&self) -> Option<i32> {
        self.row.spam_retention_days
    }
    /// Its file uploads; null: file parts are refused (`file_upload_not_supported`).
    async fn file_uploads(&self) -> Result<Option<super::files::FileUploads>> {
        Ok(self
            .row
            .file_upload_settings()
            .map_err(|_| {
                crate::error::ApiError::Internal(
                    "an endpoint's stored file settings do not parse".into(),
                )
            })?
            .map(super::files::FileUploads::from))
    }

    /// Where its submissions are delivered: every destination not removed, in order (the
    /// first webhook is `webhookUrl`).
    async fn destinations(&self, ctx: &Context<'_>) -> Result<Vec<Destination>> {
        Ok(self
            .destination_rows(ctx)
            .await?
            .into_iter()
            .map(Destination)
            .collect())
    }

    /// Whether its deliveries go out (`RUNNING`), are all held (`PAUSED`: every
    /// destination paused; see `pauseReason` and `pausedAt`), or it was deleted with its
    /// history kept (`DELETED`).
    async fn delivery_state(&self, ctx: &Context<'_>) -> Result<EndpointDeliveryState> {
        if self.row.deleted_at.is_some() {
            return Ok(EndpointDeliveryState::Deleted);
        }
        let destinations = self.destination_rows(ctx).await?;
        let all_paused =
            !destinations.is_empty() && destinations.iter().all(|d| d.paused_at.is_some());
        Ok(if all_paused {
            EndpointDeliveryState::Paused
        } else {
            EndpointDeliveryState::Running
        })
    }
    /// Why its first webhook destination's deliveries (its first destination's, without a
    /// webhook) are paused; null unless they are. `Destination.pauseReason` tells each.
    async fn pause_reason(&self, ctx: &Context<'_>) -> Result<Option<PauseReason>> {
        Ok(self.primary(ctx).await?.and_then(|d| d.pause_reason))
    }
    /// Since when that destination's deliveries are paused; null unless they are.
    async fn paused_at(&self, ctx: &Context<'_>) -> Result<Option<Timestamp>> {
        Ok(self
            .primary(ctx)
            .await?
            .and_then(|d| d.paused_at)
            .map(Timestamp))
    }
    /// That destination's deliveries that ended failed since the last one was delivered
    /// (the run that pauses it at `FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES`).
    async fn consecutive_failed_deliveries(&self, ctx: &Context<'_>) -> Result<i32> {
        Ok(self
            .primary(ctx)
            .await?
            .map_or(0, |d| d.consecutive_failed_deliveries))
    }
    /// When it was deleted with its history kept; null otherwise.
    async fn deleted_at(&self) -> Option<Timestamp> {
        self.row.deleted_at.map(Timestamp)
    }
    /// Its first webhook destination's signing secrets live now, never the secrets
    /// themselves: the current one, and the one a rotation replaced while its overlap
    /// lasts. Empty without a webhook.
    async fn webhook_secrets(&self, ctx: &Context<'_>) -> Result<Vec<WebhookSecret>> {
        let now = app(ctx).clock.now();
        Ok(self
            .first_webhook(ctx)
            .await?
            .map(|webhook| live_secrets(&webhook, now))
            .unwrap_or_default())
    }

    /// Its protection against spam: captcha, rules, Akismet; null when it has none.
    async fn spam_protection(
        &self,
        ctx: &Context<'_>,
    ) -> Result<Option<super::spam::SpamProtection>> {
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .spam_protection
            .load_one(self.row.id.clone())
            .await?
            .map(super::spam::SpamProtection))
    }

    /// This endpoint's submissions (its inbox: not those in the spam folder), newest
    /// first.
    #[graphql(complexity = "super::pagination::page_complexity(first, child_complexity)")]
    async fn submissions(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, Submission>> {
        listing::endpoint_page::<Submissions>(ctx, &self.row.id, first, after).await
    }

    /// How many of this endpoint's deliveries are in each state.
    async fn delivery_counts(&self, ctx: &Context<'_>) -> Result<DeliveryCounts> {
        let loaders = ctx.data_unchecked::<Loaders>();
        let counts = loaders
            .delivery_counts
            .load_one(self.row.id.clone())
            .await?
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
        listing::endpoint_page::<Deliveries>(ctx, &self.row.id, first, after).await
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
    /// In the spam folder: stored, answered as accepted, not delivered.
    async fn spam(&self) -> bool {
        self.0.spam
    }
    /// Why it was judged spam (its captcha, a rule, Akismet, an operator); kept after it
    /// was marked not spam, as a record. Empty for one never judged spam.
    async fn spam_reasons(&self) -> Vec<&str> {
        self.0
            .spam_reasons
            .iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
    /// When an operator last marked it spam or not spam.
    async fn spam_reviewed_at(&self) -> Option<Timestamp> {
        self.0.spam_reviewed_at.map(Timestamp)
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
    /// The files uploaded with it, in the order they came, each with a fresh download
    /// link.
    async fn files(&self, ctx: &Context<'_>) -> Result<Vec<super::files::SubmissionFile>> {
        super::files::of_submission(ctx, &self.0.id).await
    }
    /// Its delivery to the endpoint's first destination (the one a single-webhook
    /// endpoint has); null when none was made. `deliveries` lists them all.
    async fn delivery(&self, ctx: &Context<'_>) -> Result<Option<Delivery>> {
        Ok(self
            .delivery_rows(ctx)
            .await?
            .into_iter()
            .next()
            .map(Delivery))
    }
    /// One delivery per destination the endpoint had when the submission was accepted,
    /// in the destinations' order.
    async fn deliveries(&self, ctx: &Context<'_>) -> Result<Vec<Delivery>> {
        Ok(self
            .delivery_rows(ctx)
            .await?
            .into_iter()
            .map(Delivery)
            .collect())
    }
}

impl Submission {
    async fn delivery_rows(&self, ctx: &Context<'_>) -> Result<Vec<DeliveryRow>> {
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .deliveries_of_submission
            .load_one(self.0.id.clone())
            .await?
            .unwrap_or_default())
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
            .await?
            .map(Submission))
    }
    async fn endpoint(&self, ctx: &Context<'_>) -> Result<Option<Endpoint>> {
        Endpoint::load(ctx, &self.0.endpoint_id).await
    }
    /// Where it is delivered: one of its endpoint's destinations (perhaps removed since).
    /// Null only for a delivery recorded before destinations existed whose endpoint then
    /// had no webhook.
    async fn destination(&self, ctx: &Context<'_>) -> Result<Option<Destination>> {
        let Some(id) = &self.0.destination_id else {
            return Ok(None);
        };
        let loaders = ctx.data_unchecked::<Loaders>();
        let row = loaders.destinations.load_one(id.clone()).await?;
        Ok(row.map(Destination))
    }
    /// Where it is sent, captured when the submission was accepted (or when a replay
    /// retargeted it): a webhook's URL, or `mailto:` and an email destination's
    /// recipients.
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
            .await?
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
    /// A webhook's HTTP status; null for an email attempt and when no answer came.
    async fn http_status(&self) -> Option<i32> {
        self.0.response_status.filter(|_| self.0.reply.is_none())
    }
    /// An email attempt's SMTP reply code (`250`, `451`, `550`…); null for a webhook and
    /// when the mail server did not reply.
    async fn smtp_reply_code(&self) -> Option<i32> {
        self.0.response_status.filter(|_| self.0.reply.is_some())
    }
    /// An email attempt's SMTP reply text, one line of at most 500 characters (what the
    /// mail server said after the code).
    async fn smtp_reply(&self) -> Option<&str> {
        self.0.reply.as_deref()
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
    /// The destination it concerns, for a destination's own pause or resume; null for an
    /// event of the whole endpoint.
    async fn destination(&self, ctx: &Context<'_>) -> Result<Option<Destination>> {
        let Some(id) = &self.0.destination_id else {
            return Ok(None);
        };
        let loaders = ctx.data_unchecked::<Loaders>();
        Ok(loaders
            .destinations
            .load_one(id.clone())
            .await?
            .map(Destination))
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

#[derive(SimpleObject)]
pub struct ErasePersonDataPayload {
    /// The submissions erased, oldest id first.
    pub erased_submission_ids: Vec<ID>,
}

/// The listing of submissions (`Query.submissions`, `Endpoint.submissions`).
pub struct Submissions;

impl listing::Listing for Submissions {
    type Row = SubmissionRow;
    type Node = Submission;
    type Filter = SubmissionFilter;
    type FirstPages = super::loaders::EndpointSubmissionsLoader;

    fn of_endpoint(endpoint: &EndpointId) -> SubmissionFilter {
        SubmissionFilter {
            endpoint_id: Some(endpoint.clone()),
            ..SubmissionFilter::default()
        }
    }
    fn first_pages(loaders: &Loaders) -> &DataLoader<Self::FirstPages, HashMapCache> {
        &loaders.endpoint_submissions
    }
    fn page<'a>(
        conn: &'a mut AsyncPgConnection,
        filter: &'a SubmissionFilter,
        after: Option<Position>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<SubmissionRow>, DbError>> + Send + 'a {
        db::submissions::page(conn, filter, after, limit)
    }
    fn prime<'a>(
        ctx: &'a Context<'_>,
        node: Lookahead<'a>,
        rows: &'a [SubmissionRow],
    ) -> impl Future<Output = Result<(), LoadError>> + 'a {
        prime_submissions(ctx, node, rows)
    }
    fn position(row: &SubmissionRow) -> Position {
        (row.received_at, row.id.to_string())
    }
    fn node(row: SubmissionRow) -> Submission {
        Submission(row)
    }
}

/// The listing of deliveries (`Query.deliveries`, `Endpoint.deliveries`).
pub struct Deliveries;

impl listing::Listing for Deliveries {
    type Row = DeliveryRow;
    type Node = Delivery;
    type Filter = DeliveryFilter;
    type FirstPages = super::loaders::EndpointDeliveriesLoader;

    fn of_endpoint(endpoint: &EndpointId) -> DeliveryFilter {
        DeliveryFilter {
            endpoint_id: Some(endpoint.clone()),
            ..DeliveryFilter::default()
        }
    }
    fn first_pages(loaders: &Loaders) -> &DataLoader<Self::FirstPages, HashMapCache> {
        &loaders.endpoint_deliveries
    }
    fn page<'a>(
        conn: &'a mut AsyncPgConnection,
        filter: &'a DeliveryFilter,
        after: Option<Position>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<DeliveryRow>, DbError>> + Send + 'a {
        db::deliveries::page(conn, filter, after, limit)
    }
    fn prime<'a>(
        ctx: &'a Context<'_>,
        node: Lookahead<'a>,
        rows: &'a [DeliveryRow],
    ) -> impl Future<Output = Result<(), LoadError>> + 'a {
        prime_deliveries(ctx, node, rows)
    }
    fn position(row: &DeliveryRow) -> Position {
        (row.created_at, row.id.to_string())
    }
    fn node(row: DeliveryRow) -> Delivery {
        Delivery(row)
    }
}
