//! `Destination`: one of an endpoint's places to deliver to, a webhook or an email address
//! list, with its own pause state and run of failures.

use async_graphql::{Context, Enum, Object, SimpleObject, ID};
use chrono::{DateTime, Utc};

use super::app;
use super::timestamp::Timestamp;
use crate::db::models::DestinationRow;
use crate::model::receiver::RequestAuth;
use crate::model::state::{DestinationEvent, DestinationKind, PauseReason, WebhookFormat};

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
    /// What a webhook is sent: this service's signed JSON, or a chat platform's message;
    /// `STANDARD` for the other kinds.
    async fn format(&self) -> WebhookFormat {
        self.0.body_format
    }
    /// A webhook's own body template; null: its format's body.
    async fn body_template(&self) -> Option<&str> {
        self.0.body_template.as_deref()
    }
    /// An email destination's own subject and text templates; null: the standard
    /// notification (a part left null is the standard one's).
    async fn email_template(&self) -> Option<DestinationEmailTemplate> {
        self.0
            .email_template
            .as_ref()
            .map(|template| DestinationEmailTemplate {
                subject: template.subject.clone(),
                text: template.text.clone(),
            })
    }
    /// A webhook's own headers, in the order they are sent (to its current URL); a
    /// secret one's value is never answered.
    async fn headers(&self) -> Vec<DestinationHeader> {
        self.0
            .request_headers
            .0
            .iter()
            .map(|header| DestinationHeader {
                name: header.name.clone(),
                value: (!header.secret).then(|| header.value.clone()),
                secret: header.secret,
            })
            .collect()
    }
    /// How a webhook's requests authenticate to its receiver; null: they do not. The
    /// password or token is never answered.
    async fn auth(&self) -> Option<DestinationAuth> {
        self.0.request_auth.as_ref().map(|auth| match auth {
            RequestAuth::Basic { username, .. } => DestinationAuth {
                username: Some(username.clone()),
                ..DestinationAuth::of(DestinationAuthKind::Basic)
            },
            RequestAuth::Bearer { .. } => DestinationAuth::of(DestinationAuthKind::Bearer),
            RequestAuth::OAuth2 {
                token_url,
                client_id,
                scope,
                audience,
                ..
            } => DestinationAuth {
                token_url: Some(token_url.clone()),
                client_id: Some(client_id.clone()),
                scope: scope.clone(),
                audience: audience.clone(),
                ..DestinationAuth::of(DestinationAuthKind::Oauth2)
            },
        })
    }
    /// The TLS client certificate a webhook presents to its receiver; null: none. Its
    /// private key is never answered.
    async fn client_certificate(&self) -> Option<ClientCertificate> {
        let certificate = self.0.client_certificate.as_deref()?;
        Some(ClientCertificate {
            fingerprint_sha256: crate::model::client_tls::fingerprint(certificate),
        })
    }
    /// Whether a webhook trusts an extra CA of its own (`clientCa`) for its receiver's
    /// certificate, beside the public roots.
    async fn has_client_ca(&self) -> bool {
        self.0.client_ca.is_some()
    }
    /// The public key (`whpk_…`) a receiver verifies this webhook's Ed25519 signatures
    /// with (`v1a` in `webhook-signature`, beside the HMAC `v1` ones); null: it signs with
    /// HMAC only.
    async fn ed25519_public_key(&self) -> Option<String> {
        self.0
            .ed25519_key
            .as_deref()
            .and_then(crate::model::receiver::ed25519_public_key)
    }
    /// Whether its deliveries go one at a time, in the order their submissions were
    /// accepted (the next waits until the one before is delivered or failed).
    async fn ordered(&self) -> bool {
        self.0.ordered
    }
    /// Its own retry schedule; null: the server's (`FORMS_WEBHOOK_MAX_ATTEMPTS`,
    /// `FORMS_WEBHOOK_RETRY_INITIAL_SECONDS`, `FORMS_WEBHOOK_RETRY_MAX_SECONDS`).
    async fn retry_policy(&self) -> Option<DestinationRetryPolicy> {
        self.0.retry_policy.map(|policy| DestinationRetryPolicy {
            max_attempts: i32::try_from(policy.max_attempts).unwrap_or(i32::MAX),
            first_wait_seconds: policy.first_wait.as_secs_f64(),
            max_wait_seconds: policy.max_wait.as_secs_f64(),
        })
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

/// An email destination's own templates.
#[derive(SimpleObject)]
#[graphql(name = "EmailTemplate")]
pub struct DestinationEmailTemplate {
    pub subject: Option<String>,
    pub text: Option<String>,
}

/// A static header a webhook's requests carry.
#[derive(SimpleObject)]
pub struct DestinationHeader {
    pub name: String,
    /// Null for a secret header: it is set, and never shown.
    pub value: Option<String>,
    pub secret: bool,
}

#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationAuthKind {
    /// HTTP Basic: `Authorization: Basic` with the username and password.
    Basic,
    /// `Authorization: Bearer` with the token.
    Bearer,
    /// OAuth2 client credentials: `Authorization: Bearer` with a token fetched from the
    /// token URL.
    #[graphql(name = "OAUTH2")]
    Oauth2,
}

/// A webhook's TLS client certificate (the key is never shown).
#[derive(SimpleObject)]
pub struct ClientCertificate {
    /// The SHA-256 fingerprint of the leaf certificate (DER), as `AB:CD:…`.
    pub fingerprint_sha256: Option<String>,
}

/// How a webhook's requests authenticate; the password, token or client secret is never
/// shown.
#[derive(SimpleObject)]
pub struct DestinationAuth {
    pub kind: DestinationAuthKind,
    /// Basic's username; null for another kind.
    pub username: Option<String>,
    /// OAuth2's token URL, client id, scope and audience; null for another kind.
    pub token_url: Option<String>,
    pub client_id: Option<String>,
    pub scope: Option<String>,
    pub audience: Option<String>,
}

impl DestinationAuth {
    /// One of `kind` with nothing else said yet.
    fn of(kind: DestinationAuthKind) -> Self {
        DestinationAuth {
            kind,
            username: None,
            token_url: None,
            client_id: None,
            scope: None,
            audience: None,
        }
    }
}

/// A destination's own retry schedule: after the n-th failed attempt of a cycle it waits
/// `min(firstWaitSeconds × 2^(n−1), maxWaitSeconds)`, no jitter; a delivery fails after
/// `maxAttempts` attempts in a cycle (a replay starts a new one).
#[derive(SimpleObject)]
#[graphql(name = "RetryPolicy")]
pub struct DestinationRetryPolicy {
    pub max_attempts: i32,
    pub first_wait_seconds: f64,
    pub max_wait_seconds: f64,
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
