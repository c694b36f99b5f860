//! The mutations of destinations: add (a webhook or an email address list), change,
//! remove, pause, resume, rotate a webhook's secret. The rules of their settings are the
//! domain's (`model::endpoint`); `Endpoint.webhookUrl` and its mutations keep working on
//! the endpoint's first webhook destination (mutation.rs).

use async_graphql::{Context, InputObject, MaybeUndefined, Object, SimpleObject, ID};

use super::audit::{audited, Audited};
use super::error::{refused_as, ResolverError, Result};
use super::ids::{destination_or_not_found, endpoint_or_not_found};
use super::types::Destination;
use super::{app, patch};
use crate::db;
use crate::db::destinations::{AddOutcome, Switch, Switched};
use crate::db::models::DestinationRow;
use crate::db::projects::Owned;
use crate::delivery::pausing;
use crate::error::ApiError;
use crate::model::client_tls;
use crate::model::endpoint::{self as rules, Rotation};
use crate::model::endpoint::{Setting, SettingError};
use crate::model::patch::Patch;
use crate::model::receiver::{self, HeaderSetting, RequestAuth, RequestHeaders, RetryPolicy};
use crate::model::state::{DestinationEvent, DestinationKind, PauseReason, WebhookFormat};
use crate::model::template::{self, EmailTemplate};

/// An endpoint has at most this many destinations (removed ones not counted): each
/// submission writes a delivery to every one in its intake transaction.
pub const MAX_DESTINATIONS: usize = 20;

#[derive(InputObject)]
pub struct AddWebhookDestinationInput {
    pub endpoint_id: ID,
    pub url: String,
    /// Requests in flight to it at once (1–1000); left out: the workers' default.
    pub max_in_flight: Option<i32>,
    /// Left out: `[SUBMISSION_RECEIVED]`.
    pub events: Option<Vec<DestinationEvent>>,
    /// Requests started per second (1–10000), across every process; left out:
    /// unthrottled.
    pub max_requests_per_second: Option<i32>,
    /// What it is sent: this service's signed JSON (`STANDARD`), or a chat platform's
    /// message for that platform's incoming-webhook URL.
    #[graphql(default_with = "WebhookFormat::Standard")]
    pub format: WebhookFormat,
    /// Its own body (with the `STANDARD` format): a template rendered over the submission
    /// that must make one JSON document; every value it prints is written as JSON.
    pub body_template: Option<String>,
    /// Up to 20 static headers each request carries (to this URL only).
    pub headers: Option<Vec<DestinationHeaderInput>>,
    /// How its requests authenticate; left out: they do not.
    pub auth: Option<DestinationAuthInput>,
    /// Also sign with a new Ed25519 key (Standard Webhooks `v1a`, verified with
    /// `ed25519PublicKey`), beside HMAC.
    #[graphql(default)]
    pub sign_with_ed25519: bool,
    /// Its own retry schedule; left out: the server's.
    pub retry_policy: Option<RetryPolicyInput>,
    /// One request at a time, in the order the submissions were accepted: the next waits
    /// until the one before is delivered or failed.
    #[graphql(default)]
    pub ordered: bool,
    /// A TLS client certificate and key its requests present (mTLS); left out: none.
    pub client_certificate: Option<ClientCertificateInput>,
    /// Extra CA certificates (PEM) its receiver's certificate may chain to, beside the
    /// public roots; left out: the public roots alone.
    pub client_ca: Option<String>,
}

/// A TLS client certificate with its private key, both PEM; write-only. Checked when set:
/// both must parse and the key must be the certificate's own.
#[derive(InputObject)]
pub struct ClientCertificateInput {
    /// The certificate, then any intermediates (1–10 `CERTIFICATE` blocks).
    pub certificate: String,
    /// Its private key: PKCS#8, PKCS#1 or SEC1 (RSA, ECDSA P-256/P-384, Ed25519).
    pub key: String,
}

impl ClientCertificateInput {
    fn checked(self) -> Result<(String, String), SettingError> {
        client_tls::client_identity(&self.certificate, &self.key)
    }
}

/// A static header. Refused: hop-by-hop names, `Host`, `Content-Type`,
/// `Content-Length`, `Content-Encoding`, the signatures' (`Hymical-Signature`,
/// `webhook-*`) and the traces' (`traceparent`, `tracestate`); values with line breaks or
/// control characters.
#[derive(InputObject)]
pub struct DestinationHeaderInput {
    /// 1–64 token characters, once per destination (letter case aside).
    pub name: String,
    /// At most 2048 printable ASCII characters. Left out (in `updateDestination`): the
    /// value a secret header of this name has now is kept.
    pub value: Option<String>,
    /// Write-only: the value is sent, never shown (`value: null` in answers).
    #[graphql(default)]
    pub secret: bool,
}

/// One way of authenticating; the password and token are write-only.
#[derive(async_graphql::OneofObject)]
pub enum DestinationAuthInput {
    Basic(BasicAuthInput),
    Bearer(BearerAuthInput),
    #[graphql(name = "oauth2")]
    Oauth2(OAuth2AuthInput),
}

/// OAuth2 client credentials (RFC 6749 4.4): each attempt sends `Authorization: Bearer`
/// with a token from `tokenUrl`, cached in the sending process until shortly before it
/// expires, fetched again once when the receiver answers 401.
#[derive(InputObject)]
#[graphql(name = "OAuth2AuthInput")]
pub struct OAuth2AuthInput {
    /// Where tokens are asked for: the rules of a webhook URL.
    pub token_url: String,
    /// 1–256 characters.
    pub client_id: String,
    /// 1–1024 characters; write-only.
    pub client_secret: String,
    /// Space-separated scope tokens; left out: none asked for.
    pub scope: Option<String>,
    /// An `audience` parameter, for token endpoints that want one; left out: none.
    pub audience: Option<String>,
}

#[derive(InputObject)]
pub struct BasicAuthInput {
    /// 1–256 characters, no `:`.
    pub username: String,
    /// 1–1024 characters.
    pub password: String,
}

#[derive(InputObject)]
pub struct BearerAuthInput {
    /// 1–4096 visible ASCII characters.
    pub token: String,
}

/// A retry schedule: `maxAttempts` 1–1000, `firstWaitSeconds` 0.001–86400,
/// `maxWaitSeconds` from `firstWaitSeconds` to 604800 (whole milliseconds).
#[derive(InputObject)]
pub struct RetryPolicyInput {
    pub max_attempts: i32,
    pub first_wait_seconds: f64,
    pub max_wait_seconds: f64,
}

impl RetryPolicyInput {
    fn checked(self) -> Result<RetryPolicy, SettingError> {
        RetryPolicy::checked(
            self.max_attempts,
            self.first_wait_seconds,
            self.max_wait_seconds,
        )
    }
}

impl DestinationAuthInput {
    /// `allow_private`: the token URL may name an internal address (as a webhook's).
    fn checked(self, allow_private: bool) -> Result<RequestAuth, SettingError> {
        match self {
            DestinationAuthInput::Basic(basic) => {
                RequestAuth::basic(&basic.username, &basic.password)
            }
            DestinationAuthInput::Bearer(bearer) => RequestAuth::bearer(&bearer.token),
            DestinationAuthInput::Oauth2(oauth) => RequestAuth::oauth2(
                &oauth.token_url,
                &oauth.client_id,
                &oauth.client_secret,
                oauth.scope.as_deref(),
                oauth.audience.as_deref(),
                allow_private,
            ),
        }
    }
}

/// A template is a webhook's own body: a chat format has the platform's.
fn template_beside_format(destination: &DestinationRow) -> Result<(), ApiError> {
    if destination.body_template.is_some() && destination.body_format != WebhookFormat::Standard {
        return Err(ApiError::InvalidInput {
            field: "bodyTemplate".into(),
            reason: "a chat format has its platform's body; a template goes with STANDARD".into(),
        });
    }
    Ok(())
}

/// The headers to store for `wanted`, given the destination's `current` ones.
fn checked_headers(
    wanted: Vec<DestinationHeaderInput>,
    current: &RequestHeaders,
) -> Result<RequestHeaders, SettingError> {
    let settings = wanted
        .into_iter()
        .map(|header| HeaderSetting {
            name: header.name,
            value: header.value,
            secret: header.secret,
        })
        .collect();
    receiver::request_headers(settings, current)
}

#[derive(InputObject)]
pub struct AddEmailDestinationInput {
    pub endpoint_id: ID,
    /// 1 to 10 plain addresses (`owner@example.com`).
    pub recipients: Vec<String>,
    /// The form field whose value, when it is one plain address, becomes the message's
    /// Reply-To (so answering the email answers the submitter). Left out: `email`;
    /// `null`: no Reply-To.
    #[graphql(default_with = "Some(\"email\".to_string())")]
    pub reply_to_field: Option<String>,
    /// Left out: `[SUBMISSION_RECEIVED]`.
    pub events: Option<Vec<DestinationEvent>>,
    /// Messages started per second (1–10000), across every process; left out:
    /// unthrottled.
    pub max_requests_per_second: Option<i32>,
    /// Its own retry schedule; left out: the server's.
    pub retry_policy: Option<RetryPolicyInput>,
    /// One message at a time, in the order the submissions were accepted.
    #[graphql(default)]
    pub ordered: bool,
    /// Its own subject and text; left out: the standard notification.
    pub email_template: Option<EmailTemplateInput>,
}

/// An email's own subject and text: plain-text templates over the submission (the same
/// names as a body template: `submission`, `fields`, `values`, `files`); values are
/// printed as written, and the subject is made one line of at most 200 characters. A part
/// left out is the standard notification's.
#[derive(InputObject)]
pub struct EmailTemplateInput {
    pub subject: Option<String>,
    pub text: Option<String>,
}

impl EmailTemplateInput {
    fn checked(self) -> Result<EmailTemplate, SettingError> {
        template::checked_email(self.subject.as_deref(), self.text.as_deref())
    }
}

#[derive(InputObject)]
pub struct AddAutoresponderDestinationInput {
    pub endpoint_id: ID,
    /// The form field holding the submitter's address: a confirmation goes only when it
    /// holds exactly one plain address (no display name, quotes, comments or encoded
    /// words), and only to it.
    #[graphql(default = "email")]
    pub address_field: String,
    /// The confirmation's subject: one line, 1–200 characters, sent as written.
    pub subject: String,
    /// The confirmation's plain text, 1–5000 characters, sent as written: nothing of the
    /// submission is put in it.
    pub body: String,
    /// How long a mailbox that had a confirmation from it gets no other (60 s to 30
    /// days); left out: a day. Letter case, a `+tag` and dots in the local part do not
    /// make another mailbox.
    #[graphql(default = 86400)]
    pub window_seconds: i32,
    /// Its own retry schedule; left out: the server's.
    pub retry_policy: Option<RetryPolicyInput>,
}

/// A field left out is unchanged; `null` returns an optional one to its default.
#[derive(InputObject)]
pub struct UpdateDestinationInput {
    pub id: ID,
    /// A webhook's new URL: a different one gets a new signing secret (no overlap: the
    /// new receiver has no use for the old one's secret). Queued deliveries keep the URL
    /// and secret they were accepted with.
    pub url: Option<String>,
    /// An email destination's new addresses.
    pub recipients: Option<Vec<String>>,
    /// An email destination's Reply-To field; `null`: none.
    pub reply_to_field: MaybeUndefined<String>,
    pub max_in_flight: MaybeUndefined<i32>,
    pub events: Option<Vec<DestinationEvent>>,
    pub max_requests_per_second: MaybeUndefined<i32>,
    /// A webhook's body format.
    pub format: Option<WebhookFormat>,
    /// A webhook's body template; `null`: none.
    pub body_template: MaybeUndefined<String>,
    /// An email destination's own subject and text; `null`: the standard notification.
    pub email_template: MaybeUndefined<EmailTemplateInput>,
    /// A webhook's headers, replacing the list (`[]`: none); a secret header given
    /// without a value keeps the one it has.
    pub headers: Option<Vec<DestinationHeaderInput>>,
    /// A webhook's authentication; `null`: none.
    pub auth: MaybeUndefined<DestinationAuthInput>,
    /// `true`: a webhook also signs with Ed25519 (a new key if it had none; one it has
    /// stays); `false`: HMAC only, its key forgotten.
    pub sign_with_ed25519: Option<bool>,
    /// One at a time in acceptance order (`true`) or as many as its cap allows.
    pub ordered: Option<bool>,
    /// Its own retry schedule; `null`: the server's. Deliveries waiting for a retry keep
    /// the time they are due; their next failure follows the new schedule.
    pub retry_policy: MaybeUndefined<RetryPolicyInput>,
    /// A webhook's TLS client certificate and key; `null`: none.
    pub client_certificate: MaybeUndefined<ClientCertificateInput>,
    /// A webhook's extra CA certificates (PEM); `null`: the public roots alone.
    pub client_ca: MaybeUndefined<String>,
}

#[derive(SimpleObject)]
pub struct DestinationPayload {
    pub destination: Destination,
}

#[derive(SimpleObject)]
pub struct DestinationSecretPayload {
    pub destination: Destination,
    /// The signing secret, only when this mutation made a new one; never shown again.
    pub webhook_secret: Option<String>,
}

#[derive(SimpleObject)]
pub struct RemoveDestinationPayload {
    /// As removed (`state: REMOVED`), its history kept.
    pub destination: Destination,
    /// Deliveries still owed that were cancelled (ended `FAILED`, a `CANCELLED` event
    /// each).
    pub cancelled_deliveries: i32,
}

#[derive(SimpleObject)]
pub struct ResumeDestinationPayload {
    pub destination: Destination,
    /// Its deliveries pending or in flight when it resumed (0 when it was not paused).
    pub held_deliveries: i32,
}

/// Pauses or resumes the destination `id`: the destination as it is then, and how many
/// held deliveries a resume made due.
async fn switched(ctx: &Context<'_>, id: &ID, to: Switch) -> Result<(Destination, i64)> {
    let target = destination_or_not_found(id)?;
    let now = app(ctx).clock.now();
    let missing = || not_found(id.clone());
    let switched = audited(
        ctx,
        Some(Owned::Destination(&target)),
        missing,
        async |conn| {
            let switched = db::destinations::switch(conn, &target, to, now).await?;
            Ok(match &switched {
                Switched::Done(..) => Audited::changed(switched, vec![target.to_string()]),
                _ => Audited::unchanged(switched),
            })
        },
    )
    .await?;
    pausing::switched_destination(to, &target, &switched);
    let (row, held) = answered(switched, || not_found(id.clone()), || not_found(id.clone()))?;
    Ok((Destination(row), held))
}

/// A pause's or resume's outcome as the API answers it: the row and how many held
/// deliveries a resume made due (none when nothing changed); `missing` when there is no
/// such target, `deleted` when it was deleted.
pub(super) fn answered<Row>(
    switched: Switched<Row>,
    missing: impl FnOnce() -> ApiError,
    deleted: impl FnOnce() -> ApiError,
) -> Result<(Row, i64)> {
    match switched {
        Switched::Done(row, held) => Ok((row, held)),
        Switched::Already(row) => Ok((row, 0)),
        Switched::NotFound => Err(missing().into()),
        Switched::Deleted => Err(deleted().into()),
    }
}

/// A rotation of a webhook's secret now, with the overlap asked for (left out: the
/// configured one).
pub(super) fn rotation(ctx: &Context<'_>, overlap_seconds: Option<i32>) -> Result<Rotation> {
    let app = app(ctx);
    Ok(Rotation::new(
        overlap_seconds,
        app.config.webhook.secret_overlap,
        app.clock.now(),
    )?)
}

fn not_found(id: ID) -> ApiError {
    ApiError::DestinationNotFound {
        destination_id: id.0,
    }
}

/// The settings shared by both kinds, checked.
fn checked_events(events: Option<Vec<DestinationEvent>>) -> Result<Option<Vec<DestinationEvent>>> {
    events
        .map(|events| rules::events(&events).map_err(ResolverError::from))
        .transpose()
}

fn checked_rate(rate: Option<i32>) -> Result<Option<i32>> {
    rate.map(|rate| rules::max_requests_per_second(rate).map_err(ResolverError::from))
        .transpose()
}

/// Adds `destination` to its endpoint and tells this process's intake at once.
async fn add(
    ctx: &Context<'_>,
    endpoint_id: &ID,
    destination: DestinationRow,
) -> Result<Destination> {
    let owner = destination.endpoint_id.clone();
    let missing = || ApiError::EndpointNotFound {
        endpoint_id: endpoint_id.0.clone(),
    };
    let outcome = audited(ctx, Some(Owned::Endpoint(&owner)), missing, async |conn| {
        let outcome = db::destinations::add(conn, destination, MAX_DESTINATIONS).await?;
        Ok(match &outcome {
            AddOutcome::Added(row) => {
                let targets = vec![row.endpoint_id.to_string(), row.id.to_string()];
                Audited::changed(outcome, targets)
            }
            _ => Audited::unchanged(outcome),
        })
    })
    .await?;
    app(ctx).intake.endpoints.invalidate(endpoint_id);
    match outcome {
        AddOutcome::Added(row) => Ok(Destination(*row)),
        AddOutcome::EndpointNotFound => Err(ApiError::EndpointNotFound {
            endpoint_id: endpoint_id.0.clone(),
        }
        .into()),
        AddOutcome::EndpointDeleted => Err(ApiError::EndpointDeleted {
            endpoint_id: endpoint_id.0.clone(),
        }
        .into()),
        AddOutcome::LimitReached { limit } => Err(ApiError::DestinationLimitReached {
            endpoint_id: endpoint_id.0.clone(),
            limit,
        }
        .into()),
    }
}

/// Changes a destination (not removed) in one transaction: `change` computes its new
/// settings from the current ones. Tells this process's intake at once.
async fn change<F>(ctx: &Context<'_>, id: &ID, change: F) -> Result<DestinationRow>
where
    F: FnOnce(DestinationRow) -> Result<DestinationRow, ApiError> + Send + 'static,
{
    let target = destination_or_not_found(id)?;
    let missing = || not_found(id.clone());
    let changed = audited(
        ctx,
        Some(Owned::Destination(&target)),
        missing,
        async |conn| {
            let outcome = db::destinations::change::<ApiError, _>(conn, &target, change).await;
            Ok(match &outcome {
                Ok(Some(_)) => Audited::changed(outcome, vec![target.to_string()]),
                _ => Audited::unchanged(outcome),
            })
        },
    )
    .await??
    .ok_or_else(|| not_found(id.clone()))?;
    app(ctx)
        .intake
        .endpoints
        .invalidate(changed.endpoint_id.as_str());
    Ok(changed)
}

/// A webhook destination, or `DESTINATION_NOT_WEBHOOK`.
fn webhook_only(destination: &DestinationRow) -> Result<(), ApiError> {
    match destination.kind {
        DestinationKind::Webhook => Ok(()),
        DestinationKind::Email | DestinationKind::Autoresponder => {
            Err(ApiError::DestinationNotWebhook {
                destination_id: destination.id.to_string(),
            })
        }
    }
}

#[derive(Default)]
pub struct DestinationMutation;

#[Object]
impl DestinationMutation {
    /// Adds a webhook destination at the end of the endpoint's list: every submission
    /// accepted from now on is delivered to it too. Its signing secret is returned here
    /// only. `DESTINATION_LIMIT_REACHED` past 20 destinations.
    async fn add_webhook_destination(
        &self,
        ctx: &Context<'_>,
        input: AddWebhookDestinationInput,
    ) -> Result<DestinationSecretPayload> {
        let app = app(ctx);
        let endpoint_id = endpoint_or_not_found(&input.endpoint_id)?;
        let url = rules::webhook_url(&input.url, app.config.webhook.allow_private_targets)
            .map_err(refused_as("url"))?;
        let max_in_flight = input
            .max_in_flight
            .map(|cap| rules::max_in_flight(cap).map_err(ResolverError::from))
            .transpose()?;
        let events = checked_events(input.events)?;
        let max_requests_per_second = checked_rate(input.max_requests_per_second)?;
        let headers = checked_headers(
            input.headers.unwrap_or_default(),
            &RequestHeaders::default(),
        )?;
        let allow_private = app.config.webhook.allow_private_targets;
        let auth = input
            .auth
            .map(|auth| auth.checked(allow_private))
            .transpose()?;
        receiver::headers_beside_auth(Some(&url), &headers, auth.as_ref())?;
        let identity = input
            .client_certificate
            .map(ClientCertificateInput::checked)
            .transpose()?;
        let client_ca = input
            .client_ca
            .as_deref()
            .map(client_tls::client_ca)
            .transpose()?;
        let retry_policy = input
            .retry_policy
            .map(RetryPolicyInput::checked)
            .transpose()?;
        let secret = rules::new_secret();
        let mut destination =
            DestinationRow::webhook(endpoint_id, 0, url, secret.clone(), app.clock.now());
        destination.retry_policy = retry_policy;
        destination.ordered = input.ordered;
        destination.body_format = input.format;
        destination.body_template = input
            .body_template
            .map(|source| template::checked(Setting::BodyTemplate, &source))
            .transpose()?;
        template_beside_format(&destination)?;
        destination.request_headers = headers;
        destination.request_auth = auth;
        destination.ed25519_key = input.sign_with_ed25519.then(receiver::new_ed25519_key);
        (destination.client_certificate, destination.client_key) = identity.unzip();
        destination.client_ca = client_ca;
        destination.max_in_flight = max_in_flight;
        destination.max_requests_per_second = max_requests_per_second;
        if let Some(events) = events {
            destination.events = events;
        }
        let destination = add(ctx, &input.endpoint_id, destination).await?;
        Ok(DestinationSecretPayload {
            destination,
            webhook_secret: Some(secret),
        })
    }

    /// Adds an email destination at the end of the endpoint's list: every submission
    /// accepted from now on is also sent, as a notification listing its fields, to these
    /// addresses (`FORMS_SMTP_*`). `DESTINATION_LIMIT_REACHED` past 20 destinations.
    async fn add_email_destination(
        &self,
        ctx: &Context<'_>,
        input: AddEmailDestinationInput,
    ) -> Result<DestinationPayload> {
        let app = app(ctx);
        let endpoint_id = endpoint_or_not_found(&input.endpoint_id)?;
        if app.config.smtp.is_none() {
            return Err(ApiError::EmailNotConfigured.into());
        }
        let recipients = rules::recipients(&input.recipients)?;
        let max_field = app.config.intake.max_field_name_length;
        let reply_to_field = input
            .reply_to_field
            .as_deref()
            .map(|name| rules::reply_to_field(name, max_field).map_err(ResolverError::from))
            .transpose()?;
        let events = checked_events(input.events)?;
        let max_requests_per_second = checked_rate(input.max_requests_per_second)?;
        let retry_policy = input
            .retry_policy
            .map(RetryPolicyInput::checked)
            .transpose()?;
        let mut destination =
            DestinationRow::email(endpoint_id, recipients, reply_to_field, app.clock.now());
        destination.retry_policy = retry_policy;
        destination.ordered = input.ordered;
        destination.email_template = input
            .email_template
            .map(EmailTemplateInput::checked)
            .transpose()?;
        destination.max_requests_per_second = max_requests_per_second;
        if let Some(events) = events {
            destination.events = events;
        }
        Ok(DestinationPayload {
            destination: add(ctx, &input.endpoint_id, destination).await?,
        })
    }

    /// Adds an autoresponder at the end of the endpoint's list: a submission naming one
    /// plain address in `addressField` is sent this fixed confirmation by email
    /// (`FORMS_SMTP_*`), to that address only, at most once per mailbox per
    /// `windowSeconds`. A submission whose field holds anything else (no address, several,
    /// a name and an address, an encoded word) gets none. `DESTINATION_LIMIT_REACHED` past
    /// 20 destinations.
    async fn add_autoresponder_destination(
        &self,
        ctx: &Context<'_>,
        input: AddAutoresponderDestinationInput,
    ) -> Result<DestinationPayload> {
        let app = app(ctx);
        let endpoint_id = endpoint_or_not_found(&input.endpoint_id)?;
        if app.config.smtp.is_none() {
            return Err(ApiError::EmailNotConfigured.into());
        }
        // The rule of a Reply-To field, under this input's own name for it.
        let address_field = rules::reply_to_field(
            &input.address_field,
            app.config.intake.max_field_name_length,
        )
        .map_err(refused_as("addressField"))?;
        let subject = rules::reply_subject(&input.subject)?;
        let body = rules::reply_body(&input.body)?;
        let window = rules::reply_window_seconds(input.window_seconds)?;
        let retry_policy = input
            .retry_policy
            .map(RetryPolicyInput::checked)
            .transpose()?;
        let mut destination = DestinationRow::autoresponder(
            endpoint_id,
            address_field,
            subject,
            body,
            window,
            app.clock.now(),
        );
        destination.retry_policy = retry_policy;
        Ok(DestinationPayload {
            destination: add(ctx, &input.endpoint_id, destination).await?,
        })
    }

    /// Changes a destination. `url` is for a webhook and `recipients` for an email
    /// destination (the other is `INVALID_INPUT`); the same URL changes nothing, a
    /// different one gets a new secret, returned here only.
    async fn update_destination(
        &self,
        ctx: &Context<'_>,
        input: UpdateDestinationInput,
    ) -> Result<DestinationSecretPayload> {
        let app = app(ctx);
        let allow_private = app.config.webhook.allow_private_targets;
        let url = input.url;
        let recipients = input
            .recipients
            .as_deref()
            .map(|list| rules::recipients(list).map_err(ResolverError::from))
            .transpose()?;
        let max_in_flight = patch(input.max_in_flight).checked(rules::max_in_flight)?;
        let max_requests_per_second =
            patch(input.max_requests_per_second).checked(rules::max_requests_per_second)?;
        let max_field = app.config.intake.max_field_name_length;
        let reply_to_field =
            patch(input.reply_to_field).checked(|name| rules::reply_to_field(&name, max_field))?;
        let events = checked_events(input.events)?;
        let headers = input.headers;
        let format = input.format;
        let email_template = patch(input.email_template).checked(EmailTemplateInput::checked)?;
        let ordered = input.ordered;
        let body_template = patch(input.body_template)
            .checked(|source| template::checked(Setting::BodyTemplate, &source))?;
        let sign_with_ed25519 = input.sign_with_ed25519;
        let auth = patch(input.auth).checked(|auth| auth.checked(allow_private))?;
        let identity = patch(input.client_certificate).checked(ClientCertificateInput::checked)?;
        let client_ca = patch(input.client_ca).checked(|pem| client_tls::client_ca(&pem))?;
        let retry_policy = patch(input.retry_policy).checked(RetryPolicyInput::checked)?;
        let candidate_secret = rules::new_secret();
        let secret_for_change = candidate_secret.clone();
        let changed = change(ctx, &input.id, move |current| {
            let mut next = current;
            if let Some(url) = url {
                if next.kind != DestinationKind::Webhook {
                    return Err(ApiError::InvalidInput {
                        field: "url".into(),
                        reason: "only a webhook destination has a URL".into(),
                    });
                }
                if Some(url.trim()) != next.url.as_deref() {
                    let url = rules::webhook_url(&url, allow_private).map_err(refused_as("url"))?;
                    next = next.readdressed(url, secret_for_change);
                }
            }
            if let Some(recipients) = recipients {
                if next.kind != DestinationKind::Email {
                    return Err(ApiError::InvalidInput {
                        field: "recipients".into(),
                        reason: "only an email destination has recipients".into(),
                    });
                }
                next.recipients = Some(recipients.into_iter().map(Some).collect());
            }
            if reply_to_field != Patch::Keep && next.kind != DestinationKind::Email {
                return Err(ApiError::InvalidInput {
                    field: "replyToField".into(),
                    reason: "only an email destination has a Reply-To field".into(),
                });
            }
            reply_to_field.apply(&mut next.reply_to_field);
            max_in_flight.apply(&mut next.max_in_flight);
            max_requests_per_second.apply(&mut next.max_requests_per_second);
            if let Some(events) = events {
                next.events = events;
            }
            let webhook_setting = [
                ("format", format.is_some()),
                ("bodyTemplate", body_template != Patch::Keep),
                ("headers", headers.is_some()),
                ("auth", auth != Patch::Keep),
                ("signWithEd25519", sign_with_ed25519.is_some()),
                ("clientCertificate", identity != Patch::Keep),
                ("clientCa", client_ca != Patch::Keep),
            ]
            .into_iter()
            .find(|(_, given)| *given);
            if let (Some((field, _)), false) =
                (webhook_setting, next.kind == DestinationKind::Webhook)
            {
                return Err(ApiError::InvalidInput {
                    field: field.into(),
                    reason: "only a webhook destination has a format, headers, an authentication, an Ed25519 key and TLS settings".into(),
                });
            }
            match sign_with_ed25519 {
                Some(true) if next.ed25519_key.is_none() => {
                    next.ed25519_key = Some(receiver::new_ed25519_key());
                }
                Some(false) => next.ed25519_key = None,
                Some(true) | None => {}
            }
            if let Some(format) = format {
                next.body_format = format;
            }
            body_template.apply(&mut next.body_template);
            template_beside_format(&next)?;
            if let Some(headers) = headers {
                next.request_headers = checked_headers(headers, &next.request_headers)?;
            }
            auth.apply(&mut next.request_auth);
            let mut pair = next.client_certificate.take().zip(next.client_key.take());
            identity.apply(&mut pair);
            (next.client_certificate, next.client_key) = pair.unzip();
            client_ca.apply(&mut next.client_ca);
            receiver::headers_beside_auth(
                next.url.as_deref(),
                &next.request_headers,
                next.request_auth.as_ref(),
            )?;
            if let Some(ordered) = ordered {
                next.ordered = ordered;
            }
            if email_template != Patch::Keep && next.kind != DestinationKind::Email {
                return Err(ApiError::InvalidInput {
                    field: "emailTemplate".into(),
                    reason: "only an email destination has an email template".into(),
                });
            }
            email_template.apply(&mut next.email_template);
            retry_policy.apply(&mut next.retry_policy);
            Ok(next)
        })
        .await?;
        let made = changed.secret.as_deref() == Some(candidate_secret.as_str());
        Ok(DestinationSecretPayload {
            destination: Destination(changed),
            webhook_secret: made.then_some(candidate_secret),
        })
    }

    /// Removes a destination, keeping its history (`state: REMOVED`): submissions
    /// accepted from now on make no delivery for it. What it still owes goes out as
    /// accepted, unless `cancelDeliveries: true`, which ends it `FAILED` (a `CANCELLED`
    /// event each). Removing the endpoint's first webhook changes its `webhookUrl` to the
    /// next webhook destination's, if any.
    async fn remove_destination(
        &self,
        ctx: &Context<'_>,
        id: ID,
        cancel_deliveries: Option<bool>,
    ) -> Result<RemoveDestinationPayload> {
        let app = app(ctx);
        let target = destination_or_not_found(&id)?;
        let cancel = cancel_deliveries.unwrap_or(false);
        let now = app.clock.now();
        let missing = || not_found(id.clone());
        let (row, cancelled) = audited(
            ctx,
            Some(Owned::Destination(&target)),
            missing,
            async |conn| {
                let removed = db::destinations::remove_one(conn, &target, cancel, now).await?;
                Ok(match &removed {
                    Some(_) => Audited::changed(removed, vec![target.to_string()]),
                    None => Audited::unchanged(removed),
                })
            },
        )
        .await?
        .ok_or_else(|| not_found(id.clone()))?;
        app.intake.endpoints.invalidate(row.endpoint_id.as_str());
        tracing::warn!(
            endpoint_id = %row.endpoint_id,
            destination_id = %row.id,
            cancelled,
            "destination removed"
        );
        Ok(RemoveDestinationPayload {
            destination: Destination(row),
            cancelled_deliveries: i32::try_from(cancelled).unwrap_or(i32::MAX),
        })
    }

    /// Pauses a destination's deliveries by hand (reason `OPERATOR`): its deliveries are
    /// still queued, nothing is attempted until `resumeDestination`; the endpoint's other
    /// destinations go on. One paused already stays as it is.
    async fn pause_destination(&self, ctx: &Context<'_>, id: ID) -> Result<DestinationPayload> {
        switched(ctx, &id, Switch::Pause(PauseReason::Operator))
            .await
            .map(|(destination, _)| DestinationPayload { destination })
    }

    /// Resumes a paused destination, whatever paused it: its held deliveries are due at
    /// once, each with the attempts it had left, and its run of failed deliveries starts
    /// again. One not paused stays as it is (`heldDeliveries: 0`).
    async fn resume_destination(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> Result<ResumeDestinationPayload> {
        let (destination, held) = switched(ctx, &id, Switch::Resume).await?;
        Ok(ResumeDestinationPayload {
            destination,
            held_deliveries: i32::try_from(held).unwrap_or(i32::MAX),
        })
    }

    /// A webhook destination's new signing secret, as `rotateWebhookSecret` does for the
    /// endpoint's first webhook (the same overlap rules). `DESTINATION_NOT_WEBHOOK` for an
    /// email destination.
    async fn rotate_destination_secret(
        &self,
        ctx: &Context<'_>,
        id: ID,
        overlap_seconds: Option<i32>,
    ) -> Result<DestinationSecretPayload> {
        let rotation = rotation(ctx, overlap_seconds)?;
        let secret = rotation.secret.clone();
        let changed = change(ctx, &id, move |current| {
            webhook_only(&current)?;
            Ok(current.rotated(rotation))
        })
        .await?;
        Ok(DestinationSecretPayload {
            destination: Destination(changed),
            webhook_secret: Some(secret),
        })
    }

    /// Ends a webhook destination's rotation overlap now (as `endWebhookSecretOverlap`).
    async fn end_destination_secret_overlap(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> Result<DestinationPayload> {
        let changed = change(ctx, &id, move |current| {
            webhook_only(&current)?;
            Ok(current.overlap_ended())
        })
        .await?;
        Ok(DestinationPayload {
            destination: Destination(changed),
        })
    }
}
