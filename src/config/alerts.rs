//! `FORMS_ALERT_*`: where operator alerts go (src/delivery/alerts.rs). A destination that
//! keeps failing is announced once before it would pause, and once when it pauses and
//! when it resumes: by email to `FORMS_ALERT_EMAILS` (through `FORMS_SMTP_*`) and as an
//! operational webhook to `FORMS_ALERT_WEBHOOK_URL`, signed with
//! `FORMS_ALERT_WEBHOOK_SECRET`. Both unset: the alerts are recorded (and the events
//! shown in GraphQL) but sent nowhere.

use base64::Engine;

use super::reader::{shorten, Reader};
use super::Secret;

/// The operational webhook's target and key.
#[derive(Debug, Clone)]
pub struct AlertWebhook {
    pub url: String,
    /// `whsec_` and a base64 key, as a Standard Webhooks verifier takes it.
    pub secret: Secret,
}

#[derive(Debug, Clone, Default)]
pub struct AlertConfig {
    /// Operators' addresses; empty: no alert email.
    pub emails: Vec<String>,
    pub webhook: Option<AlertWebhook>,
}

const EMAILS: &str = "FORMS_ALERT_EMAILS";
const WEBHOOK_URL: &str = "FORMS_ALERT_WEBHOOK_URL";
const WEBHOOK_SECRET: &str = "FORMS_ALERT_WEBHOOK_SECRET";
/// At most this many operator addresses: alerts go to a team's list, not a broadcast.
const MAX_EMAILS: usize = 10;

/// Reads the section; `smtp` says whether `FORMS_SMTP_HOST` is set, `allow_private`
/// whether webhooks may go to internal addresses.
pub(super) fn read(r: &mut Reader, smtp: bool, allow_private: bool) -> AlertConfig {
    let emails = read_emails(r);
    if !emails.is_empty() && !smtp && !r.failed(&["FORMS_SMTP_HOST"]) {
        r.fail(
            EMAILS,
            "set, but FORMS_SMTP_HOST is not".into(),
            "only with FORMS_SMTP_HOST (alert email goes through that server)",
        );
    }
    let url = read_url(r, allow_private);
    let secret = read_secret(r);
    let webhook = match (url, secret) {
        (Some(url), Some(secret)) => Some(AlertWebhook { url, secret }),
        (Some(_), None) => {
            if !r.failed(&[WEBHOOK_SECRET]) {
                r.fail(
                    WEBHOOK_SECRET,
                    "unset, but FORMS_ALERT_WEBHOOK_URL is set".into(),
                    "a whsec_ key that signs the operational webhook",
                );
            }
            None
        }
        (None, Some(_)) => {
            if !r.failed(&[WEBHOOK_URL]) {
                r.fail(
                    WEBHOOK_SECRET,
                    "set, but FORMS_ALERT_WEBHOOK_URL is not".into(),
                    "only with FORMS_ALERT_WEBHOOK_URL",
                );
            }
            None
        }
        (None, None) => None,
    };
    AlertConfig { emails, webhook }
}

fn read_emails(r: &mut Reader) -> Vec<String> {
    let Some(raw) = r.raw(EMAILS) else {
        return Vec::new();
    };
    let rule = "1 to 10 plain ASCII email addresses separated by commas";
    let mut emails: Vec<String> = Vec::new();
    for part in raw.split(',') {
        let address = part.trim();
        match address.parse::<lettre::Address>() {
            Ok(parsed) if address.is_ascii() => {
                let address = parsed.to_string();
                if !emails.contains(&address) {
                    emails.push(address);
                }
            }
            _ => {
                r.fail(
                    EMAILS,
                    format!("{:?} is not an email address", shorten(address)),
                    rule,
                );
                return Vec::new();
            }
        }
    }
    if emails.len() > MAX_EMAILS {
        r.fail(EMAILS, format!("{} addresses", emails.len()), rule);
        return Vec::new();
    }
    emails
}

/// Checked as every webhook URL is (`model::destination`), internal addresses included:
/// a target the webhook client would refuse at every send is refused at start.
fn read_url(r: &mut Reader, allow_private: bool) -> Option<String> {
    let raw = r.raw(WEBHOOK_URL)?;
    match crate::model::destination::validate_webhook_url(&raw, allow_private) {
        Ok(_) => Some(raw.trim().to_string()),
        Err(error) => {
            r.fail(
                WEBHOOK_URL,
                format!("{:?} is not a webhook URL: {error}", shorten(&raw)),
                "an http:// or https:// URL, not an internal address (unless FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS)",
            );
            None
        }
    }
}

fn read_secret(r: &mut Reader) -> Option<Secret> {
    let raw = r.raw(WEBHOOK_SECRET)?;
    let key = raw.strip_prefix("whsec_").and_then(|encoded| {
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
    });
    match key {
        Some(key) if (24..=64).contains(&key.len()) => Some(Secret::new(raw)),
        // Only the length of a refused secret is told.
        _ => {
            r.fail(
                WEBHOOK_SECRET,
                format!("the value has {} characters", raw.chars().count()),
                "whsec_ and the base64 of a 24 to 64 byte key (openssl rand -base64 32)",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_with(vars: &[(&str, &str)], smtp: bool) -> (AlertConfig, Vec<String>) {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        let mut r = Reader::new(&lookup);
        let config = read(&mut r, smtp, false);
        let failed = r.errors.iter().map(|e| e.variable.to_string()).collect();
        (config, failed)
    }

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn channels_are_read_and_checked() {
        let (config, failed) = read_with(&[], false);
        assert!(config.emails.is_empty() && config.webhook.is_none() && failed.is_empty());
        let (config, failed) = read_with(
            &[
                (
                    EMAILS,
                    "ops@example.com, oncall@example.com,ops@example.com",
                ),
                (WEBHOOK_URL, "https://alerts.example.com/hook"),
                (WEBHOOK_SECRET, SECRET),
            ],
            true,
        );
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(config.emails, ["ops@example.com", "oncall@example.com"]);
        assert_eq!(
            config.webhook.map(|w| w.url),
            Some("https://alerts.example.com/hook".to_string())
        );
    }

    #[test]
    fn every_bad_value_names_its_variable() {
        for (vars, smtp, variable) in [
            (vec![(EMAILS, "ops@example.com")], false, EMAILS),
            (vec![(EMAILS, "ops@example.com\nBcc: x@y.z")], true, EMAILS),
            (vec![(EMAILS, "not an address")], true, EMAILS),
            (vec![(WEBHOOK_URL, "ftp://example.com")], true, WEBHOOK_URL),
            (
                vec![
                    (WEBHOOK_URL, "http://10.0.0.5/alerts"),
                    (WEBHOOK_SECRET, SECRET),
                ],
                true,
                WEBHOOK_URL,
            ),
            (
                vec![(WEBHOOK_URL, "https://example.com")],
                true,
                WEBHOOK_SECRET,
            ),
            (vec![(WEBHOOK_SECRET, SECRET)], true, WEBHOOK_SECRET),
            (
                vec![
                    (WEBHOOK_URL, "https://example.com"),
                    (WEBHOOK_SECRET, "whsec_c2hvcnQ="),
                ],
                true,
                WEBHOOK_SECRET,
            ),
        ] {
            let (_, failed) = read_with(&vars, smtp);
            assert_eq!(failed, [variable], "{vars:?}");
        }
    }
}
