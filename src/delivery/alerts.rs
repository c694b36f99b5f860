//! Sending operator alerts: a destination's warning before a pause, its pause and its
//! resume (db/alerts.rs holds what is owed, written with each event). Every worker process
//! runs one sender; a sender takes due alerts under a lease, so each is sent by one
//! process at a time, and marks each channel once it took the alert, so a retry sends
//! only what is still owed. Email goes to `FORMS_ALERT_EMAILS` through the mailer, the
//! operational webhook to `FORMS_ALERT_WEBHOOK_URL` through the webhook client (the same
//! address rules as every webhook), signed with the Standard Webhooks headers alone (no
//! `Hymical-Signature`: payload::sign decides that by the kind of request).
//! An alert's Message-ID and `webhook-id` come from its event, the same on every retry.
//!
//! Sending is at least once, like every delivery: a sender that dies after a channel took
//! an alert but before it wrote so sends it again after the lease.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::client::WebhookClient;
use super::email::{escape_html, MailOutcome, Mailer, OutgoingEmail};
use super::outcome::Outcome;
use super::payload;
use crate::clock::{format_timestamp, Clock};
use crate::config::AlertConfig;
use crate::db::alerts::{self, AlertProgress, AlertRow};
use crate::db::Db;
use crate::model::state::EndpointEventKind;
use crate::telemetry::meters;

/// How long an alert taken is left to its sender before another may take it: beyond the
/// mail and webhook timeouts of both channels.
const LEASE: Duration = Duration::from_secs(120);
/// Alerts taken at once.
const BATCH: i64 = 20;
/// Attempts before an alert is given up (logged), spaced as `backoff` says: about a day.
const MAX_ATTEMPTS: i32 = 20;
/// Finished alerts are kept this long, then deleted.
const KEEP_FINISHED: chrono::Duration = chrono::Duration::days(7);

pub struct AlertSender {
    db: Db,
    config: AlertConfig,
    mailer: Option<Mailer>,
    webhook: WebhookClient,
    clock: Arc<dyn Clock>,
}

impl AlertSender {
    pub fn new(
        db: Db,
        config: AlertConfig,
        mailer: Option<Mailer>,
        webhook: WebhookClient,
        clock: Arc<dyn Clock>,
    ) -> AlertSender {
        AlertSender {
            db,
            config,
            mailer,
            webhook,
            clock,
        }
    }

    /// Sends the alerts due now (the `alerts` upkeep job, every second).
    pub async fn send_due(&self) {
        let now = self.clock.now();
        let taken = match self
            .db
            .run(async |conn| alerts::take_due(conn, now, LEASE, BATCH).await)
            .await
        {
            Ok(taken) => taken,
            Err(error) => {
                tracing::warn!(error = %error.summary(), "could not take the operator alerts owed");
                return;
            }
        };
        for alert in taken {
            let progress = self.send(&alert).await;
            if let Err(error) = self
                .db
                .run(async |conn| alerts::record(conn, alert.id, &progress).await)
                .await
            {
                tracing::warn!(alert_id = alert.id, error = %error.summary(), "could not record an operator alert's sending");
            }
        }
    }

    /// Sends what `alert` still owes to each configured channel.
    async fn send(&self, alert: &AlertRow) -> AlertProgress {
        let mut errors: Vec<String> = Vec::new();
        let mut email_sent_at = alert.email_sent_at;
        if let (Some(mailer), false, None) = (
            &self.mailer,
            self.config.emails.is_empty(),
            alert.email_sent_at,
        ) {
            match mailer
                .send(&email(alert, &self.config.emails, mailer))
                .await
            {
                MailOutcome::Accepted { .. } => {
                    meters::operator_alert_sent("email", alert.kind);
                    email_sent_at = Some(self.clock.now());
                }
                other => errors.push(format!("email: {}", describe(&other))),
            }
        }
        let mut webhook_sent_at = alert.webhook_sent_at;
        if let (Some(target), None) = (&self.config.webhook, alert.webhook_sent_at) {
            let now = self.clock.now();
            let body = webhook_body(alert, now);
            let signing = payload::Signing::Operational {
                secret: target.secret.expose(),
            };
            let (signatures, unsigned) = payload::sign(&webhook_id(alert), signing, now, &body);
            if unsigned > 0 {
                // The configuration refuses such a secret at start; say so if it happens.
                tracing::error!(
                    alert_id = alert.id,
                    "FORMS_ALERT_WEBHOOK_SECRET is not a whsec_ key; the alert goes unsigned"
                );
            }
            let result = self
                .webhook
                .send(
                    &target.url,
                    body,
                    &signatures,
                    &[],
                    None,
                    &super::client::ReceiverCredentials::default(),
                )
                .await;
            if result.outcome == Outcome::Succeeded {
                meters::operator_alert_sent("webhook", alert.kind);
                webhook_sent_at = Some(self.clock.now());
            } else {
                errors.push(format!(
                    "webhook: {}",
                    result.error.as_deref().unwrap_or(result.outcome.as_str())
                ));
            }
        }
        let owed = (!self.config.emails.is_empty() && email_sent_at.is_none())
            || (self.config.webhook.is_some() && webhook_sent_at.is_none());
        let next_attempt_at = if !owed {
            None
        } else if alert.attempts >= MAX_ATTEMPTS {
            tracing::warn!(
                alert_id = alert.id,
                endpoint_id = %alert.endpoint_id,
                destination_id = %alert.destination_id,
                kind = alert.kind.as_str(),
                attempts = alert.attempts,
                "an operator alert was given up: a channel refused it every time"
            );
            None
        } else {
            Some(self.clock.now() + backoff(alert.attempts))
        };
        // The column holds 200 characters.
        let last_error =
            (!errors.is_empty()).then(|| errors.join("; ").chars().take(200).collect());
        AlertProgress {
            email_sent_at,
            webhook_sent_at,
            next_attempt_at,
            last_error,
        }
    }

    /// Deletes the alerts finished long ago (the `alerts_cleanup` upkeep job, hourly).
    pub async fn delete_finished(&self) {
        let cutoff = self.clock.now() - KEEP_FINISHED;
        if let Err(error) = self
            .db
            .run(async |conn| alerts::delete_finished(conn, cutoff, 10_000).await)
            .await
        {
            tracing::warn!(error = %error.summary(), "could not delete finished operator alerts");
        }
    }
}

/// 10 s after the first attempt, doubling, at most an hour apart.
fn backoff(attempts: i32) -> chrono::Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(9);
    chrono::Duration::seconds((10_i64 << doublings).min(3600))
}

fn describe(outcome: &MailOutcome) -> String {
    match outcome {
        MailOutcome::Accepted { code, .. } => format!("accepted ({code})"),
        MailOutcome::Rejected { code, .. } => format!("refused ({code})"),
        MailOutcome::Deferred { code, .. } => format!("deferred ({code})"),
        MailOutcome::TimedOut => "timed out".into(),
        MailOutcome::ConnectionFailed { reason } | MailOutcome::Unsendable { reason } => {
            reason.clone()
        }
    }
}

/// The Standard Webhooks `type` and the words of each kind of alert.
fn event_type(kind: EndpointEventKind) -> &'static str {
    match kind {
        EndpointEventKind::Failing => "destination.failing",
        EndpointEventKind::Paused => "destination.paused",
        EndpointEventKind::Resumed => "destination.resumed",
        EndpointEventKind::Deleted => "endpoint.deleted",
    }
}

fn webhook_id(alert: &AlertRow) -> String {
    format!("alert_{}", alert.event_id)
}

#[derive(Serialize)]
struct AlertBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: AlertData<'a>,
}

#[derive(Serialize)]
struct AlertData<'a> {
    endpoint_id: &'a str,
    destination_id: &'a str,
    event_id: i64,
    occurred_at: String,
    reason: Option<&'static str>,
    consecutive_failed_deliveries: i32,
}

/// The operational webhook's body, in the Standard Webhooks shape (`type`, `timestamp`,
/// `data`).
fn webhook_body(alert: &AlertRow, now: chrono::DateTime<chrono::Utc>) -> Vec<u8> {
    let body = AlertBody {
        kind: event_type(alert.kind),
        timestamp: format_timestamp(now),
        data: AlertData {
            endpoint_id: alert.endpoint_id.as_str(),
            destination_id: alert.destination_id.as_str(),
            event_id: alert.event_id,
            occurred_at: format_timestamp(alert.occurred_at),
            reason: alert.reason.map(|r| r.as_str()),
            consecutive_failed_deliveries: alert.failed_deliveries,
        },
    };
    // Strings and numbers only: serialising cannot fail.
    serde_json::to_vec(&body).expect("an alert body is strings and numbers")
}

/// The alert email: a fixed text naming the endpoint, the destination, what happened and
/// what to do; nothing a submitter wrote.
fn email(alert: &AlertRow, to: &[String], mailer: &Mailer) -> OutgoingEmail {
    let endpoint = alert.endpoint_id.as_str();
    let destination = alert.destination_id.as_str();
    let failed = alert.failed_deliveries;
    let (subject, what) = match alert.kind {
        EndpointEventKind::Failing => (
            format!("Deliveries of endpoint {endpoint} are failing"),
            format!(
                "The last {failed} deliveries to destination {destination} of endpoint {endpoint} failed. \
                 If failures go on, the destination will be paused: its deliveries will then be held until it is resumed."
            ),
        ),
        EndpointEventKind::Paused => (
            format!("Deliveries of endpoint {endpoint} are paused"),
            format!(
                "Destination {destination} of endpoint {endpoint} was paused ({}). Its deliveries are held, \
                 unattempted, until it is resumed (resumeDestination, or the console).",
                alert.reason.map_or("", |r| r.as_str())
            ),
        ),
        EndpointEventKind::Resumed | EndpointEventKind::Deleted => (
            format!("Deliveries of endpoint {endpoint} are resumed"),
            format!(
                "Destination {destination} of endpoint {endpoint} was resumed: its held deliveries are due again."
            ),
        ),
    };
    let occurred = format_timestamp(alert.occurred_at);
    let text = format!("{what}\n\nAt {occurred} (event {}).\n", alert.event_id);
    let html = format!(
        "<p>{}</p><p>At {} (event {}).</p>",
        escape_html(&what),
        escape_html(&occurred),
        alert.event_id
    );
    OutgoingEmail {
        to: to.to_vec(),
        subject,
        text,
        html,
        reply_to: None,
        message_id: format!("<alert-{}@{}>", alert.event_id, mailer.message_domain()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_ten_seconds_to_an_hour() {
        let seconds: Vec<i64> = (1..=12).map(|n| backoff(n).num_seconds()).collect();
        assert_eq!(
            seconds,
            [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600]
        );
    }
}
