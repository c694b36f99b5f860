//! A sender per destination kind, behind one [`Senders::send`]: a webhook (a signed POST
//! through the webhook client), an email (the submission's notification to the recipients
//! captured with it) and an autoresponder (a confirmation to the address the submission
//! names). The worker claims, hands the delivery to its kind's sender, and records what
//! came back; a sender never touches the queue.

use chrono::{DateTime, Utc};

use super::chat;
use super::client::{ReceiverCredentials, ReceiverHeader, ReceiverTls, WebhookClient};
use super::email::{self, Mailer, Notification, OutgoingEmail};
use super::oauth::ClientCredentials;
use super::outcome::AttemptResult;
use super::payload;
use crate::db::models::ClaimedDelivery;
use crate::files::FileMetadata;
use crate::model::ids::SubmissionId;
use crate::model::receiver::{self, RequestAuth};
use crate::model::state::{AttemptOutcome, DestinationKind, WebhookFormat};
use crate::model::template;

/// What the workers send with: the webhook client, and the mailer when this process has
/// a mail server (`FORMS_SMTP_HOST`).
pub struct Senders {
    pub webhook: WebhookClient,
    /// `None` without `FORMS_SMTP_HOST`: email deliveries are then retried until one is.
    pub mail: Option<Mailer>,
}

/// The submission a delivery carries, as its claim read it, with its files described.
pub struct Submission<'a> {
    pub id: &'a SubmissionId,
    pub received_at: DateTime<Utc>,
    pub fields: &'a serde_json::Value,
    pub files: &'a [FileMetadata],
}

impl Senders {
    /// Sends `delivery` of `submission` once, by its destination's kind; a webhook's
    /// request carries `trace_parent`, the attempt's trace context (traces on).
    pub async fn send(
        &self,
        delivery: &ClaimedDelivery,
        submission: &Submission<'_>,
        attempted_at: DateTime<Utc>,
        trace_parent: Option<&str>,
    ) -> AttemptResult {
        match delivery.kind {
            DestinationKind::Webhook => match signed_body(delivery, submission, attempted_at) {
                Ok((body, signatures)) => {
                    self.webhook
                        .send(
                            &delivery.destination_url,
                            body,
                            &signatures,
                            &receiver_headers(delivery),
                            trace_parent,
                            &receiver_credentials(delivery),
                        )
                        .await
                }
                Err(unsendable) => unsendable,
            },
            DestinationKind::Email => {
                self.mail(|domain| notification(delivery, submission, domain))
                    .await
            }
            DestinationKind::Autoresponder => {
                self.mail(|domain| autoresponse(delivery, submission, domain))
                    .await
            }
        }
    }

    /// Sends the email `build` makes (given the sender's domain, for its Message-ID), or
    /// the failure it answers instead. Without a mailer every attempt fails as a network
    /// error would, and is retried on the schedule until a mail server is configured.
    async fn mail(
        &self,
        build: impl FnOnce(&str) -> Result<OutgoingEmail, AttemptResult>,
    ) -> AttemptResult {
        let Some(mailer) = &self.mail else {
            return AttemptResult::failure(
                AttemptOutcome::NetworkError,
                "email is not set up on this server (FORMS_SMTP_HOST)",
            );
        };
        match build(mailer.message_domain()) {
            Ok(message) => AttemptResult::from_mail(mailer.send(&message).await),
            Err(unsendable) => unsendable,
        }
    }
}

/// A webhook's body (the payload, its template's body, or the chat platform's message its
/// format names) and its signatures: the snapshot secret's (`Hymical-Signature`), the
/// destination's live secrets' and Ed25519 key's (`webhook-signature`). It is POSTed to
/// the captured URL.
fn signed_body(
    delivery: &ClaimedDelivery,
    submission: &Submission<'_>,
    attempted_at: DateTime<Utc>,
) -> Result<(Vec<u8>, payload::SignatureHeaders), AttemptResult> {
    let Some(snapshot) = delivery.signing_secret.as_deref() else {
        // The delivery row's CHECK makes this impossible; fail it loudly rather than
        // send an unsigned request.
        tracing::error!(delivery_id = %delivery.id, "a webhook delivery has no signing secret");
        return Err(AttemptResult::failure(
            AttemptOutcome::BlockedDestination,
            "the delivery has no signing secret",
        ));
    };
    let body = webhook_body(delivery, submission)?;
    let live: Vec<&str> = [
        delivery.destination_secret.as_deref(),
        delivery.destination_previous_secret.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let ed25519 = delivery
        .receiver
        .ed25519_key
        .as_deref()
        .and_then(receiver::ed25519_signing_key);
    if delivery.receiver.ed25519_key.is_some() && ed25519.is_none() {
        // The stored format (a CHECK) makes this impossible; say so if it happens.
        tracing::error!(delivery_id = %delivery.id, "a destination's Ed25519 key is not in the whsk_ format; v1a goes without it");
    }
    let signing = payload::Signing::Submission {
        snapshot,
        live: &live,
        ed25519: ed25519.as_ref(),
    };
    let (signatures, unsigned) = payload::sign(delivery.id.as_str(), signing, attempted_at, &body);
    if unsigned > 0 {
        // The stored format (a CHECK) makes this impossible; say so if it happens.
        tracing::error!(delivery_id = %delivery.id, secrets = unsigned, "a secret is not in the whsec_ format; webhook-signature goes without it");
    }
    Ok((body, signatures))
}

/// The headers a webhook's receiver asked for, as claimed: its own, in order, then its
/// authentication's `Authorization`. Secret values and credentials are sensitive.
fn receiver_headers(delivery: &ClaimedDelivery) -> Vec<ReceiverHeader> {
    let own = delivery
        .receiver
        .request_headers
        .iter()
        .flat_map(|headers| &headers.0);
    own.map(|header| ReceiverHeader {
        name: header.name.clone(),
        value: header.value.clone(),
        sensitive: header.secret,
    })
    .chain(
        delivery
            .receiver
            .request_auth
            .iter()
            .filter_map(RequestAuth::authorization)
            .map(|value| ReceiverHeader {
                name: "authorization".into(),
                value,
                sensitive: true,
            }),
    )
    .collect()
}

/// A webhook's OAuth2 client credentials and TLS settings, as claimed (for its current
/// URL only, as its other credentials).
fn receiver_credentials(delivery: &ClaimedDelivery) -> ReceiverCredentials<'_> {
    let oauth2 = match &delivery.receiver.request_auth {
        Some(RequestAuth::OAuth2 {
            token_url,
            client_id,
            client_secret,
            scope,
            audience,
        }) => Some(ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scope: scope.as_deref(),
            audience: audience.as_deref(),
        }),
        Some(RequestAuth::Basic { .. } | RequestAuth::Bearer { .. }) | None => None,
    };
    ReceiverCredentials {
        oauth2,
        tls: ReceiverTls {
            identity: delivery
                .receiver
                .client_certificate
                .as_deref()
                .zip(delivery.receiver.client_key.as_deref()),
            ca: delivery.receiver.client_ca.as_deref(),
        },
    }
}

/// A webhook's body: its template's, the chat platform's its format names, or the
/// standard payload; each made only when it is the one sent (the standard webhook, the
/// common case, formats and copies nothing else). A submission the template cannot
/// render is final: it renders the same way on every attempt.
fn webhook_body(
    delivery: &ClaimedDelivery,
    submission: &Submission<'_>,
) -> Result<Vec<u8>, AttemptResult> {
    if let Some(template) = &delivery.receiver.body_template {
        let context = template_context(delivery, submission)?;
        return template::render(template, &context).map_err(|problem| {
            AttemptResult::failure(
                AttemptOutcome::Unsendable,
                format!("the body template cannot render this submission: {problem}"),
            )
        });
    }
    if delivery.receiver.body_format == WebhookFormat::Standard {
        return Ok(payload::body(
            submission.id,
            &delivery.endpoint_id,
            submission.received_at,
            submission.fields,
            submission.files,
        ));
    }
    let received_at = crate::clock::format_timestamp(submission.received_at);
    let message = chat::ChatMessage {
        endpoint_name: delivery
            .endpoint_name
            .as_deref()
            .unwrap_or(delivery.endpoint_id.as_str()),
        submission_id: submission.id.as_str(),
        received_at: &received_at,
        fields: submission.fields,
        files: submission.files,
    };
    chat::body(delivery.receiver.body_format, &message).ok_or_else(|| {
        AttemptResult::failure(
            AttemptOutcome::Unsendable,
            "the destination's format has no chat body",
        )
    })
}

/// What a body or email template of `delivery` renders over (`template::context`).
fn template_context(
    delivery: &ClaimedDelivery,
    submission: &Submission<'_>,
) -> Result<serde_json::Value, AttemptResult> {
    let Ok(files) = serde_json::to_value(submission.files) else {
        return Err(AttemptResult::failure(
            AttemptOutcome::Unsendable,
            "the submission's files could not be described",
        ));
    };
    Ok(template::context(
        submission.id.as_str(),
        delivery.endpoint_id.as_str(),
        &crate::clock::format_timestamp(submission.received_at),
        submission.fields,
        files,
    ))
}

/// An email destination's message: the notification of its submission to the recipients
/// captured with it, Message-ID from the delivery id so that a retry or replay is
/// recognisable; its own subject and text when it has templates for them (a submission
/// its template cannot render is final, as the same submission renders the same way on
/// every attempt).
fn notification(
    delivery: &ClaimedDelivery,
    submission: &Submission<'_>,
    message_domain: &str,
) -> Result<OutgoingEmail, AttemptResult> {
    let mut message = email::notification(&Notification {
        endpoint_name: delivery
            .endpoint_name
            .as_deref()
            .unwrap_or(delivery.endpoint_id.as_str()),
        endpoint_id: delivery.endpoint_id.as_str(),
        submission_id: submission.id.as_str(),
        received_at: submission.received_at,
        fields: submission.fields,
        to: delivery.recipients(),
        reply_to_field: delivery.reply_to_field.as_deref(),
        delivery_id: delivery.id.as_str(),
        message_domain,
        files: submission.files,
    });
    let Some(own) = &delivery.receiver.email_template else {
        return Ok(message);
    };
    let unrenderable = |problem: template::TemplateProblem| {
        AttemptResult::failure(
            AttemptOutcome::Unsendable,
            format!("the email template cannot render this submission: {problem}"),
        )
    };
    let context = template_context(delivery, submission)?;
    if let Some(subject) = &own.subject {
        message.subject = template::render_subject(subject, &context).map_err(unrenderable)?;
    }
    if let Some(text) = &own.text {
        message.text = template::render_text(text, &context).map_err(unrenderable)?;
        message.html = email::preformatted_html(&message.subject, &message.text);
    }
    Ok(message)
}

/// An autoresponder's confirmation, to the address the submission names in the
/// destination's field (read again here, as intake checked it), with the destination's
/// subject and text as the claim read them.
fn autoresponse(
    delivery: &ClaimedDelivery,
    submission: &Submission<'_>,
    message_domain: &str,
) -> Result<OutgoingEmail, AttemptResult> {
    let (Some(field), Some(subject), Some(body)) = (
        delivery.reply_to_field.as_deref(),
        delivery.reply_subject.as_deref(),
        delivery.reply_body.as_deref(),
    ) else {
        return Err(AttemptResult::failure(
            AttemptOutcome::Unsendable,
            "the destination is not an autoresponder",
        ));
    };
    let Some(to) = email::submitter_address(submission.fields, field) else {
        return Err(AttemptResult::failure(
            AttemptOutcome::Unsendable,
            "the submission names no single plain address in the autoresponder's field",
        ));
    };
    Ok(email::autoresponse(
        &to,
        subject,
        body,
        delivery.id.as_str(),
        message_domain,
    ))
}
