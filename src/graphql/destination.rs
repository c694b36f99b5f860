//! `Destination`: one of an endpoint's places to deliver to, a webhook or an email address
//! list, with its own pause state and run of failures.

use async_graphql::{Context, Enum, Object, SimpleObject, ID};
use chrono::{DateTime, Utc};

use super::app;
use super::timestamp::Timestamp;
use crate::db::models::DestinationRow;
use crate::model::state::{DestinationEvent, DestinationKind, PauseReason};

pub struct Destination(pub DestinationRow);

/// Where a destination's deliveries stand.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationState {
    /// Its deliveries go out.
    Running,
    /// Its deliveries are held, unattempted, until it is resumed (see `pauseReason`).
    Paused,
    /// Removed with its history kept: new submissions make no delivery for it.
    Removed,
}

#[Object]
impl Destination {
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn endpoint_id(&self) -> ID {
        ID(self.0.endpoint_id.to_string())
    }
    async fn kind(&self) -> DestinationKind {
        self.0.kind
    }
    /// Its place among the endpoint's destinations.
    async fn position(&self) -> i32 {
        self.0.position
    }
    /// A webhook's URL; null for an email destination.
    async fn url(&self) -> Option<&str> {
        self.0.url.as_deref()
    }
    /// An email destination's addresses; empty for a webhook.
    async fn recipients(&self) -> Vec<&str> {
        self.0.recipients().collect()
    }
    /// An email destination's field whose value, one plain address, becomes Reply-To
    /// (null: none); an autoresponder's field holding the address it answers; null for a
    /// webhook.
    async fn reply_to_field(&self) -> Option<&str> {
        self.0.reply_to_field.as_deref()
    }
    /// An autoresponder's subject, sent as written; null for the other kinds.
    async fn reply_subject(&self) -> Option<&str> {
        self.0.reply_subject.as_deref()
    }

    /// An autoresponder's plain text, sent as written; null for the other kinds.
    async fn reply_body(&self) -> Option<&str> {
        self.0.reply_body.as_deref()
    }

    /// How long an address an autoresponder answered gets no other answer from it;
    /// null for the other kinds.
    async fn reply_window_seconds(&self) -> Option<i32> {
        self.0.reply_window_seconds
    }

    /// A webhook's signing secrets live now, never the secrets themselves. Empty for an
    /// email destination.
    async fn webhook_secrets(&self, ctx: &Context<'_>) -> Vec<WebhookSecret> {
        live_secrets(&self.0, app(ctx).clock.now())
    }
    /// Requests in flight to it at once, across every worker; null: the workers' default
    /// (`FORMS_WORKER_ENDPOINT_CONCURRENCY`).
    async fn max_in_flight(&self) -> Option<i32> {
        self.0.max_in_flight
    }
    /// The event types it receives.
    async fn events(&self) -> &[DestinationEvent] {
        &self.0.events
    }
    /// At most this many requests start to it each second, across every process; null:
    /// unthrottled.
    async fn max_requests_per_second(&self) -> Option<i32> {
        self.0.max_requests_per_second
    }
    async fn state(&self) -> DestinationState {
        if self.0.removed_at.is_some() {
            DestinationState::Removed
        } else if self.0.paused_at.is_some() {
            DestinationState::Paused
        } else {
            DestinationState::Running
        }
    }
    /// Why its deliveries are paused; null unless they are.
    async fn pause_reason(&self) -> Option<PauseReason> {
        self.0.pause_reason
    }
    /// Since when; null unless paused.
    async fn paused_at(&self) -> Option<Timestamp> {
        self.0.paused_at.map(Timestamp)
    }
    /// Its deliveries that ended failed since the last one was delivered.
    async fn consecutive_failed_deliveries(&self) -> i32 {
        self.0.consecutive_failed_deliveries
    }
    async fn created_at(&self) -> Timestamp {
        Timestamp(self.0.created_at)
    }
    /// When it was removed (its history kept); null otherwise.
    async fn removed_at(&self) -> Option<Timestamp> {
        self.0.removed_at.map(Timestamp)
    }
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

/// A webhook destination's secrets live at `now`: the current one, and the one a rotation
/// replaced while its overlap lasts.
pub fn live_secrets(webhook: &DestinationRow, now: DateTime<Utc>) -> Vec<WebhookSecret> {
    let mut live = Vec::new();
    if let Some(current) = &webhook.secret {
        live.push(WebhookSecret::new(
            current,
            WebhookSecretRole::Current,
            None,
        ));
    }
    if let (Some(previous), Some(until)) = (
        webhook.live_previous_secret(now),
        webhook.previous_secret_expires_at,
    ) {
        live.push(WebhookSecret::new(
            previous,
            WebhookSecretRole::Previous,
            Some(until),
        ));
    }
    live
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
