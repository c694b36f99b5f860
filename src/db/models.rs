//! The rows the queries read and write, typed with the domain's vocabularies and ids (each
//! column is checked once, when it is read: an unknown state or a malformed id is an error).

use chrono::{DateTime, Utc};
use diesel::prelude::*;

use super::schema::{
    delivery_attempts, delivery_events, destinations, endpoint_events, endpoint_spam_protection,
    endpoints, management_api_keys, submissions, webhook_deliveries,
};
use crate::model::endpoint::Rotation;
use crate::model::ids::{
    ClaimToken, DeliveryId, DestinationId, EndpointId, KeyId, ProjectId, SubmissionId,
};
use crate::model::receiver::{RequestAuth, RequestHeaders, RetryPolicy};
use crate::model::state::{
    AttemptOutcome, CaptchaProvider, DeliveryState, DestinationEvent, DestinationKind,
    EndpointEventKind, EventKind, KeyRole, PauseReason, WebhookFormat, WhenUnreachable,
};
use crate::model::template::EmailTemplate;

/// An endpoint: its settings for intake. Where its submissions go is its destinations
/// ([`DestinationRow`]). (The table still has the webhook and pause columns of the release
/// before destinations, for its processes during a rolling upgrade; nothing here reads
/// them.)
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = endpoints)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct EndpointRow {
    pub id: EndpointId,
    pub name: String,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub redirect_url: Option<String>,
    /// The column is `text[]` with a CHECK against NULL elements; Diesel's generated type
    /// still admits them, so they are skipped on read.
    pub allowed_origins: Vec<Option<String>>,
    pub honeypot_field: Option<String>,
    /// Set when it was deleted with its history kept: the row is a tombstone.
    pub deleted_at: Option<DateTime<Utc>>,
    /// Its file settings (`model::files::FileUploadSettings` as JSON); `None`: file parts
    /// are refused.
    pub file_uploads: Option<serde_json::Value>,
    /// Days its submissions are kept in the inbox and in the spam folder (0: for ever);
    /// `None`: the server's.
    pub retention_days: Option<i32>,
    pub spam_retention_days: Option<i32>,
    /// The project it belongs to, for ever (an endpoint never moves).
    pub project_id: ProjectId,
}

impl EndpointRow {
    /// A new, active endpoint with no browser options.
    pub fn new(id: EndpointId, name: String, created_at: DateTime<Utc>) -> EndpointRow {
        EndpointRow {
            id,
            name,
            is_active: true,
            created_at,
            redirect_url: None,
            allowed_origins: Vec::new(),
            honeypot_field: None,
            deleted_at: None,
            file_uploads: None,
            retention_days: None,
            spam_retention_days: None,
            project_id: ProjectId::default_project(),
        }
    }

    /// Its file settings, `None` when it takes no files. A stored value this build cannot
    /// read is an error, never "off": intake would otherwise quietly refuse files an
    /// operator allowed.
    pub fn file_upload_settings(
        &self,
    ) -> Result<Option<crate::model::files::FileUploadSettings>, serde_json::Error> {
        self.file_uploads
            .as_ref()
            .map(|value| serde_json::from_value(value.clone()))
            .transpose()
    }

    pub fn allowed_origins(&self) -> impl Iterator<Item = &str> {
        self.allowed_origins.iter().flatten().map(String::as_str)
    }
}

/// One of an endpoint's destinations: a webhook (URL, secrets) or an email address list,
/// each with its own pause state, run of failures and cap on requests in flight.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = destinations)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct DestinationRow {
    pub id: DestinationId,
    pub endpoint_id: EndpointId,
    pub kind: DestinationKind,
    /// Its place among the endpoint's destinations (the first webhook is the endpoint's
    /// `webhookUrl`).
    pub position: i32,
    pub url: Option<String>,
    pub secret: Option<String>,
    /// The secret a rotation replaced; live (signing beside the current one) until
    /// `previous_secret_expires_at`.
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// An email destination's addresses (the column admits no NULL element).
    pub recipients: Option<Vec<Option<String>>>,
    /// An email destination's field whose value, one plain address, becomes Reply-To.
    pub reply_to_field: Option<String>,
    /// Requests in flight to it at once; `None`: the workers' default.
    pub max_in_flight: Option<i32>,
    /// The event types it receives (the column admits no NULL element).
    pub events: Vec<DestinationEvent>,
    /// Requests started per second, across every process; `None`: unthrottled.
    pub max_requests_per_second: Option<i32>,
    /// Set while its deliveries are paused, with why.
    pub paused_at: Option<DateTime<Utc>>,
    pub pause_reason: Option<PauseReason>,
    /// Its deliveries that ended `failed` since the last one delivered.
    pub consecutive_failed_deliveries: i32,
    pub created_at: DateTime<Utc>,
    /// Removed with its history kept: new submissions make no delivery for it.
    pub removed_at: Option<DateTime<Utc>>,
    /// An autoresponder's confirmation: the operator's fixed subject and text, and how long
    /// an address that had one gets no other.
    pub reply_subject: Option<String>,
    pub reply_body: Option<String>,
    pub reply_window_seconds: Option<i32>,
    /// A webhook's body: this service's JSON or a chat platform's message.
    pub body_format: WebhookFormat,
    /// A webhook's own body template (model/template.rs), with the standard format only.
    pub body_template: Option<String>,
    /// An email destination's own subject and text templates.
    pub email_template: Option<EmailTemplate>,
    /// A webhook's own headers and authentication, sent with each request to its current
    /// URL (model/receiver.rs).
    pub request_headers: RequestHeaders,
    pub request_auth: Option<RequestAuth>,
    /// A webhook's Ed25519 signing key (`whsk_`), when it signs `v1a` beside `v1`.
    pub ed25519_key: Option<String>,
    /// Its own retry schedule, all three set or none (`None`: the server's).
    pub retry_policy: Option<RetryPolicy>,
    /// A webhook's TLS client certificate and its key (PEM, both or neither; write-only),
    /// and an extra CA its receiver's certificate may chain to (model/receiver.rs).
    pub client_certificate: Option<String>,
    pub client_key: Option<String>,
    pub client_ca: Option<String>,
    /// Its deliveries go one at a time, in the order their submissions were accepted.
    pub ordered: bool,
}

impl DestinationRow {
    /// A new email destination (its position is given when it is appended).
    pub fn email(
        endpoint_id: EndpointId,
        recipients: Vec<String>,
        reply_to_field: Option<String>,
        created_at: DateTime<Utc>,
    ) -> DestinationRow {
        DestinationRow {
            kind: DestinationKind::Email,
            url: None,
            secret: None,
            recipients: Some(recipients.into_iter().map(Some).collect()),
            reply_to_field,
            ..DestinationRow::webhook(endpoint_id, 0, String::new(), String::new(), created_at)
        }
    }

    /// A new autoresponder: `subject` and `body` sent to the one address in the form field
    /// `address_field`, at most once per mailbox per `window_seconds` (the window's key
    /// folds case, a `+tag` and dots: docs/delivery.md, "Autoresponders").
    pub fn autoresponder(
        endpoint_id: EndpointId,
        address_field: String,
        subject: String,
        body: String,
        window_seconds: i32,
        created_at: DateTime<Utc>,
    ) -> DestinationRow {
        DestinationRow {
            kind: DestinationKind::Autoresponder,
            url: None,
            secret: None,
            reply_to_field: Some(address_field),
            reply_subject: Some(subject),
            reply_body: Some(body),
            reply_window_seconds: Some(window_seconds),
            ..DestinationRow::webhook(endpoint_id, 0, String::new(), String::new(), created_at)
        }
    }

    /// A new webhook destination at `position`.
    pub fn webhook(
        endpoint_id: EndpointId,
        position: i32,
        url: String,
        secret: String,
        created_at: DateTime<Utc>,
    ) -> DestinationRow {
        DestinationRow {
            id: DestinationId::generate(),
            endpoint_id,
            kind: DestinationKind::Webhook,
            position,
            url: Some(url),
            secret: Some(secret),
            previous_secret: None,
            previous_secret_expires_at: None,
            recipients: None,
            reply_to_field: None,
            max_in_flight: None,
            events: vec![DestinationEvent::SubmissionReceived],
            max_requests_per_second: None,
            paused_at: None,
            pause_reason: None,
            consecutive_failed_deliveries: 0,
            created_at,
            removed_at: None,
            reply_subject: None,
            reply_body: None,
            reply_window_seconds: None,
            body_format: WebhookFormat::Standard,
            body_template: None,
            email_template: None,
            request_headers: RequestHeaders::default(),
            request_auth: None,
            ed25519_key: None,
            retry_policy: None,
            client_certificate: None,
            client_key: None,
            client_ca: None,
            ordered: false,
        }
    }

    /// The webhook with the rotation's secret current. The secret it replaces stays live
    /// (signing `webhook-signature` beside the new one) until the rotation's overlap ends,
    /// when it has one; one replaced by an earlier rotation stops signing now.
    pub fn rotated(self, rotation: Rotation) -> DestinationRow {
        let replaced = self.secret.clone();
        let (previous_secret, previous_secret_expires_at) =
            match (replaced, rotation.previous_until) {
                (Some(old), Some(until)) => (Some(old), Some(until)),
                _ => (None, None),
            };
        DestinationRow {
            secret: Some(rotation.secret),
            previous_secret,
            previous_secret_expires_at,
            ..self
        }
    }

    /// The webhook at a new URL with a new secret and no overlap, and a new Ed25519 key if
    /// it signs with one: a new receiver has no use for the old one's. At another origin
    /// (scheme, host or port) its authentication and secret headers are dropped too: a
    /// new receiver is never sent the credentials meant for the old one (the caller sets
    /// new ones after this).
    pub fn readdressed(self, url: String, secret: String) -> DestinationRow {
        let origin = |raw: &str| url::Url::parse(raw).ok().map(|url| url.origin());
        let same_origin = self
            .url
            .as_deref()
            .and_then(origin)
            .is_some_and(|old| origin(&url) == Some(old));
        let (request_auth, request_headers) = if same_origin {
            (self.request_auth.clone(), self.request_headers.clone())
        } else {
            let kept = self.request_headers.0.iter().filter(|h| !h.secret).cloned();
            (None, RequestHeaders(kept.collect()))
        };
        let ed25519_key = self
            .ed25519_key
            .as_ref()
            .map(|_| crate::model::receiver::new_ed25519_key());
        DestinationRow {
            url: Some(url),
            secret: Some(secret),
            request_auth,
            request_headers,
            ed25519_key,
            ..self.overlap_ended()
        }
    }

    /// The webhook with its rotation's overlap ended: the replaced secret signs no more.
    pub fn overlap_ended(self) -> DestinationRow {
        DestinationRow {
            previous_secret: None,
            previous_secret_expires_at: None,
            ..self
        }
    }

    /// The previous secret while it is still live at `now`.
    pub fn live_previous_secret(&self, now: DateTime<Utc>) -> Option<&str> {
        match (&self.previous_secret, self.previous_secret_expires_at) {
            (Some(secret), Some(until)) if until > now => Some(secret),
            _ => None,
        }
    }

    pub fn recipients(&self) -> impl Iterator<Item = &str> {
        self.recipients
            .iter()
            .flatten()
            .flatten()
            .map(String::as_str)
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
    /// In the spam folder: no delivery was queued for it.
    pub spam: bool,
    /// Why it was judged spam (kept after an operator's "not spam", as a record). The
    /// column's CHECK holds no NULL element; Diesel's type admits them, so they are skipped.
    pub spam_reasons: Vec<Option<String>>,
    /// When an operator last marked it spam or not spam.
    pub spam_reviewed_at: Option<DateTime<Utc>>,
}

/// An endpoint's protection against spam (`endpoint_spam_protection`): its captcha, its
/// rules and whether Akismet judges its submissions.
#[derive(Debug, Clone, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = endpoint_spam_protection)]
#[diesel(check_for_backend(diesel::pg::Pg))]
#[diesel(treat_none_as_null = true)]
pub struct SpamProtectionRow {
    pub endpoint_id: EndpointId,
    pub captcha_provider: Option<CaptchaProvider>,
    pub captcha_secret: Option<String>,
    pub captcha_min_score: Option<f32>,
    pub when_unreachable: WhenUnreachable,
    pub max_links: Option<i32>,
    pub blocked_words: Vec<Option<String>>,
    pub blocked_patterns: Vec<Option<String>>,
    pub blocked_senders: Vec<Option<String>>,
    pub min_fill_seconds: Option<i32>,
    pub akismet: bool,
    pub updated_at: DateTime<Utc>,
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
    /// `None` only for history from before destinations whose endpoint had no webhook
    /// destination to name (migration history_destinations).
    pub destination_id: Option<DestinationId>,
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
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
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
    /// A webhook's HTTP status, or an email's SMTP reply code.
    pub response_status: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i32,
    pub late: bool,
    /// An email attempt's SMTP reply text (set whenever the server replied).
    pub reply: Option<String>,
}

/// A delivery a worker now holds, with what it needs to send it.
#[derive(Debug, Clone, Queryable)]
pub struct ClaimedDelivery {
    pub id: DeliveryId,
    pub claim_token: ClaimToken,
    pub endpoint_id: EndpointId,
    pub destination_id: DestinationId,
    pub kind: DestinationKind,
    /// A webhook's URL, an email's `mailto:` of its recipients, or an autoresponder's
    /// `autoresponder:` and the field naming the address, as captured.
    pub destination_url: String,
    /// A webhook's snapshot secret; `None` for an email.
    pub signing_secret: Option<String>,
    pub submission_id: Option<SubmissionId>,
    /// Requests since the delivery last entered the queue: the owner's next state is
    /// decided from it.
    pub cycle_attempts: i32,
    /// The submission's time and fields; `None` when the submission was erased.
    pub received_at: Option<DateTime<Utc>>,
    pub fields: Option<serde_json::Value>,
    /// The destination's own secrets now, when the delivery goes to its current URL: the
    /// current one and a rotated-out one still in its overlap window. They sign
    /// `webhook-signature` (the snapshot does when there are none).
    pub destination_secret: Option<String>,
    pub destination_previous_secret: Option<String>,
    /// The destination's run of failed deliveries when this was claimed (a delivery resets
    /// a nonzero one).
    pub destination_failed_deliveries: i32,
    /// For an email: its endpoint's name (the Subject names it) and the destination's
    /// Reply-To field; for an autoresponder: the field naming the address, and its subject
    /// and text as they are now. `None` for a webhook.
    pub endpoint_name: Option<String>,
    pub reply_to_field: Option<String>,
    pub reply_subject: Option<String>,
    pub reply_body: Option<String>,
    /// Whether its submission has uploaded files (their descriptions and links go in the
    /// webhook and the email; they are read only then).
    pub has_files: bool,
    /// How its receiver is called: the destination's options (ReceiverOptions).
    pub receiver: ReceiverOptions,
    /// The W3C trace context its submission was accepted in (`None`: traces were off
    /// then), which its attempt continues (telemetry/traces.rs).
    pub trace_parent: Option<String>,
}

/// A destination's options for calling its receiver, as a claimed delivery carries them.
#[derive(Debug, Clone, Queryable)]
pub struct ReceiverOptions {
    /// The destination's body format and template.
    pub body_format: WebhookFormat,
    pub body_template: Option<String>,
    /// An email destination's own subject and text templates.
    pub email_template: Option<EmailTemplate>,
    /// The destination's own headers and authentication when the delivery goes to its
    /// current URL (an earlier receiver is never sent a later one's credentials); empty
    /// and `None` otherwise.
    pub request_headers: Option<RequestHeaders>,
    pub request_auth: Option<RequestAuth>,
    /// The destination's Ed25519 key, for its current URL only, when it signs `v1a`.
    pub ed25519_key: Option<String>,
    /// The destination's TLS client certificate, its key and extra CA, for its current
    /// URL only (as its credentials).
    pub client_certificate: Option<String>,
    pub client_key: Option<String>,
    pub client_ca: Option<String>,
    /// The destination's own retry schedule (`None`: the server's).
    pub retry_policy: Option<RetryPolicy>,
}

impl ReceiverOptions {
    /// None of its own: the standard body, headers and schedule, no credentials. What a
    /// delivery claimed at intake has (intake claims only such destinations).
    pub fn standard() -> ReceiverOptions {
        ReceiverOptions {
            body_format: WebhookFormat::Standard,
            body_template: None,
            email_template: None,
            request_headers: None,
            request_auth: None,
            ed25519_key: None,
            client_certificate: None,
            client_key: None,
            client_ca: None,
            retry_policy: None,
        }
    }
}

impl ClaimedDelivery {
    /// A fresh claim of a delivery of `kind` to `url`, its submission erased, for unit
    /// tests.
    #[cfg(test)]
    pub fn for_test(kind: DestinationKind, url: &str) -> ClaimedDelivery {
        ClaimedDelivery {
            id: DeliveryId::generate(),
            claim_token: ClaimToken::generate(),
            endpoint_id: EndpointId::parse("contact").expect("id"),
            destination_id: DestinationId::generate(),
            kind,
            destination_url: url.into(),
            signing_secret: None,
            submission_id: None,
            cycle_attempts: 0,
            received_at: None,
            fields: None,
            destination_secret: None,
            destination_previous_secret: None,
            destination_failed_deliveries: 0,
            endpoint_name: None,
            reply_to_field: None,
            reply_subject: None,
            reply_body: None,
            has_files: false,
            receiver: ReceiverOptions::standard(),
            trace_parent: None,
        }
    }

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
    /// The one project it sees; `None`: every project.
    pub project_id: Option<ProjectId>,
    /// When it stops working; `None`: never.
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = super::schema::projects)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct ProjectRow {
    pub id: ProjectId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
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
    /// The destination a pause or resume was of; `None` for a deletion, and for events
    /// written before destinations.
    pub destination_id: Option<DestinationId>,
}
