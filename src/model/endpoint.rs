//! The rules an endpoint's settings follow, in one place for every caller (the GraphQL
//! mutations; intake reads what they stored). Each takes what a client sent and returns
//! the value to store, or which setting is wrong and why.

use url::Url;

use super::destination::{self, DestinationError};
use super::fields::{self, NameProblem};
use super::state::DestinationEvent;

/// An endpoint lists at most this many allowed origins.
const MAX_ORIGINS: usize = 100;
/// Names (of endpoints and of management keys) are 1–200 characters once trimmed.
const MAX_NAME_LENGTH: usize = 200;
/// An email destination lists at most this many addresses.
pub const MAX_RECIPIENTS: usize = 10;
/// The longest address an email destination takes (RFC 5321's path limit, less `<>`).
const MAX_ADDRESS_LENGTH: usize = 254;
/// An endpoint's own retention: 0 (kept for ever) to this many days, the server's cap.
const MAX_RETENTION_DAYS: i32 = 1_000_000;
/// A destination's cap on requests in flight: 1 to this.
const MAX_IN_FLIGHT: i32 = 1000;
/// A destination's throttle: 1 to this many requests a second.
const MAX_REQUESTS_PER_SECOND: i32 = 10_000;

/// A setting of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Name,
    RedirectUrl,
    AllowedOrigins,
    HoneypotField,
    Recipients,
    ReplyToField,
    MaxInFlight,
    MaxRequestsPerSecond,
    Events,
    ReplySubject,
    ReplyBody,
    ReplyWindowSeconds,
    CaptchaSecret,
    CaptchaMinScore,
    MaxLinks,
    BlockedWords,
    BlockedPatterns,
    BlockedSenders,
    MinFillSeconds,
    Akismet,
    OverlapSeconds,
    Headers,
    HeaderName,
    HeaderValue,
    BasicUsername,
    BasicPassword,
    BearerToken,
    RetryMaxAttempts,
    RetryFirstWait,
    RetryMaxWait,
    BodyTemplate,
    SubjectTemplate,
    TextTemplate,
    OAuth2TokenUrl,
    OAuth2ClientId,
    OAuth2ClientSecret,
    OAuth2Scope,
    OAuth2Audience,
    ClientCertificate,
    ClientKey,
    ClientCa,
    RetentionDays,
    SpamRetentionDays,
}

/// A setting that breaks its rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// The webhook URL is not a destination deliveries may go to.
    #[error("the webhook URL is not allowed: {0}")]
    WebhookUrl(DestinationError),
    #[error("{reason}")]
    Invalid {
        setting: Setting,
        reason: &'static str,
    },
    /// A template that cannot be used, with where (`model::template`).
    #[error("{problem}")]
    Template { setting: Setting, problem: String },
}

fn invalid(setting: Setting, reason: &'static str) -> SettingError {
    SettingError::Invalid { setting, reason }
}

/// A name: trimmed, 1–200 characters.
pub fn name(raw: &str) -> Result<String, SettingError> {
    let name = raw.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_LENGTH {
        return Err(invalid(Setting::Name, "must be 1 to 200 characters"));
    }
    Ok(name.to_string())
}

/// A webhook URL (see `destination::validate_webhook_url`), stored trimmed.
pub fn webhook_url(raw: &str, allow_private: bool) -> Result<String, SettingError> {
    destination::validate_webhook_url(raw, allow_private)
        .map(|_| raw.trim().to_string())
        .map_err(SettingError::WebhookUrl)
}

/// Where a browser goes after a successful post: an absolute http(s) URL with a host,
/// written as such (nothing the URL parser would repair), at most 2048 characters.
pub fn redirect_url(raw: &str) -> Result<String, SettingError> {
    let absolute = || {
        invalid(
            Setting::RedirectUrl,
            "must be an absolute http or https URL",
        )
    };
    let parsed = Url::parse(raw.trim()).map_err(|_| absolute())?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host().is_none()
        || !destination::written_with_authority(raw.trim())
    {
        return Err(absolute());
    }
    if raw.chars().count() > destination::MAX_URL_LENGTH {
        return Err(invalid(
            Setting::RedirectUrl,
            "must be at most 2048 characters",
        ));
    }
    Ok(raw.trim().to_string())
}

/// Origins as browsers send them: `scheme://host[:port]`, stored in that form,
/// duplicates dropped, at most 100.
pub fn allowed_origins(origins: &[String]) -> Result<Vec<String>, SettingError> {
    let malformed = || {
        invalid(
            Setting::AllowedOrigins,
            "each origin must be scheme://host[:port]",
        )
    };
    if origins.len() > MAX_ORIGINS {
        return Err(invalid(Setting::AllowedOrigins, "at most 100 origins"));
    }
    let mut valid: Vec<String> = Vec::new();
    for origin in origins {
        let parsed = Url::parse(origin.trim()).map_err(|_| malformed())?;
        let serialised = parsed.origin().ascii_serialization();
        let bare = parsed.path() == "/"
            && parsed.query().is_none()
            && parsed.fragment().is_none()
            && parsed.username().is_empty();
        if !matches!(parsed.scheme(), "http" | "https") || !bare || serialised == "null" {
            return Err(malformed());
        }
        if !valid.contains(&serialised) {
            valid.push(serialised);
        }
    }
    Ok(valid)
}

/// A new signing secret: `whsec_` and 64 lowercase hex digits (32 random bytes).
pub fn new_secret() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

/// The longest overlap a rotation may ask for: 30 days.
pub const MAX_OVERLAP_SECONDS: i32 = 30 * 86_400;

/// A rotation of a webhook's signing secret: the new secret, and until when the one it
/// replaces still signs beside it (`None`: it stops now).
#[derive(Debug, Clone)]
pub struct Rotation {
    pub secret: String,
    pub previous_until: Option<chrono::DateTime<chrono::Utc>>,
}

impl Rotation {
    /// A rotation at `now` with the overlap asked for, in seconds (none: `default`).
    pub fn new(
        overlap_seconds: Option<i32>,
        default: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Rotation, SettingError> {
        let overlap = match overlap_seconds {
            None => default,
            Some(seconds) if (0..=MAX_OVERLAP_SECONDS).contains(&seconds) => {
                std::time::Duration::from_secs(u64::from(seconds.unsigned_abs()))
            }
            Some(_) => {
                return Err(invalid(
                    Setting::OverlapSeconds,
                    "must be from 0 to 2592000 (30 days)",
                ))
            }
        };
        // Both bounds are days (the configuration caps the default as this caps a request),
        // so the end is a representable time; `None` is only ever a zero overlap.
        let previous_until = (!overlap.is_zero())
            .then(|| chrono::Duration::from_std(overlap).ok())
            .flatten()
            .and_then(|overlap| now.checked_add_signed(overlap));
        Ok(Rotation {
            secret: new_secret(),
            previous_until,
        })
    }
}

/// The columns of field names (`endpoints.honeypot_field`,
/// `destinations.reply_to_field`) hold at most this many characters.
const FIELD_SETTING_MAX_LENGTH: usize = 128;

/// The honeypot field: a field name the console's form snippet writes into an `<input
/// name="…">` that an operator pastes into a public page, so it is held to what such a
/// name needs: an ASCII letter, then ASCII letters, digits, `-`, `_`, `.`, `[` and `]`.
/// Nothing that could end the attribute or start markup (`"`, `'`, `<`, `>`, `&`,
/// spaces) gets in. Within `max_length` (the field-name limit), and no longer than its
/// column, whatever that limit is raised to. Values stored before this rule are still
/// read as they are (the console escapes what it writes).
pub fn honeypot_field(name: &str, max_length: usize) -> Result<String, SettingError> {
    form_field_name(Setting::HoneypotField, name, max_length)
}

/// The field an email destination takes Reply-To from (the submitter's address): a field
/// name as the honeypot field's rule has it.
pub fn reply_to_field(name: &str, max_length: usize) -> Result<String, SettingError> {
    form_field_name(Setting::ReplyToField, name, max_length)
}

/// A field name an operator configures and a form carries: see [`honeypot_field`].
fn form_field_name(
    setting: Setting,
    name: &str,
    max_length: usize,
) -> Result<String, SettingError> {
    let refused = || {
        invalid(
            setting,
            "must start with an ASCII letter and hold only ASCII letters, digits, '-', '_', '.', '[' and ']'",
        )
    };
    match fields::name_problem(name, max_length.min(FIELD_SETTING_MAX_LENGTH)) {
        None => {}
        Some(NameProblem::Empty | NameProblem::ControlCharacter) => return Err(refused()),
        Some(NameProblem::TooLong { .. }) => {
            return Err(invalid(
                setting,
                "must be no longer than a field name may be",
            ))
        }
    }
    let mut characters = name.chars();
    let starts_with_a_letter = characters.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !starts_with_a_letter
        || !characters
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '[' | ']'))
    {
        return Err(refused());
    }
    Ok(name.to_string())
}

/// An email destination's addresses: 1 to 10 plain ASCII addresses (`user@example.com`,
/// no display name), each at most 254 characters, none twice (letter case aside); stored
/// trimmed, in the order given. ASCII only: a server without SMTPUTF8 refuses anything
/// else, and an address that can never be sent to is better refused here.
pub fn recipients(raw: &[String]) -> Result<Vec<String>, SettingError> {
    const RULE: &str =
        "must be 1 to 10 distinct plain email addresses (ASCII, at most 254 characters each)";
    if raw.is_empty() || raw.len() > MAX_RECIPIENTS {
        return Err(invalid(Setting::Recipients, RULE));
    }
    let mut valid: Vec<String> = Vec::with_capacity(raw.len());
    for address in raw {
        let address = address.trim();
        let plain = !address.is_empty()
            && address.len() <= MAX_ADDRESS_LENGTH
            && address.is_ascii()
            && !address.chars().any(|c| c.is_ascii_control() || c == ' ')
            && address.parse::<lettre::Address>().is_ok();
        if !plain || valid.iter().any(|seen| seen.eq_ignore_ascii_case(address)) {
            return Err(invalid(Setting::Recipients, RULE));
        }
        valid.push(address.to_string());
    }
    Ok(valid)
}

/// A destination's cap on requests in flight at once: 1 to 1000.
pub fn max_in_flight(raw: i32) -> Result<i32, SettingError> {
    if (1..=MAX_IN_FLIGHT).contains(&raw) {
        Ok(raw)
    } else {
        Err(invalid(Setting::MaxInFlight, "must be from 1 to 1000"))
    }
}

/// An endpoint's own number of days its submissions are kept (`setting` says whether in
/// the inbox or in the spam folder): 0 (for ever) to 1,000,000, as the server's own.
pub fn retention_days(setting: Setting, raw: i32) -> Result<i32, SettingError> {
    if (0..=MAX_RETENTION_DAYS).contains(&raw) {
        Ok(raw)
    } else {
        Err(invalid(
            setting,
            "must be from 0 (kept for ever) to 1000000 days",
        ))
    }
}

/// A destination's throttle: 1 to 10,000 requests a second.
pub fn max_requests_per_second(raw: i32) -> Result<i32, SettingError> {
    if (1..=MAX_REQUESTS_PER_SECOND).contains(&raw) {
        Ok(raw)
    } else {
        Err(invalid(
            Setting::MaxRequestsPerSecond,
            "must be from 1 to 10000",
        ))
    }
}

/// An autoresponder's subject: trimmed, 1–200 characters, one line (no control character).
pub fn reply_subject(raw: &str) -> Result<String, SettingError> {
    let subject = raw.trim();
    if subject.is_empty() || subject.chars().count() > 200 {
        return Err(invalid(
            Setting::ReplySubject,
            "must be 1 to 200 characters",
        ));
    }
    if subject.chars().any(char::is_control) {
        return Err(invalid(Setting::ReplySubject, "must be one line of text"));
    }
    Ok(subject.to_string())
}

/// An autoresponder's text: 1–5000 characters of plain text, lines ending in `\n` (a
/// `\r\n` becomes `\n`), no other control character but the tab.
pub fn reply_body(raw: &str) -> Result<String, SettingError> {
    let body = raw.replace("\r\n", "\n");
    let body = body.trim_end();
    if body.trim().is_empty() || body.chars().count() > 5000 {
        return Err(invalid(Setting::ReplyBody, "must be 1 to 5000 characters"));
    }
    if body
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(invalid(
            Setting::ReplyBody,
            "must be plain text: no control characters but line breaks and tabs",
        ));
    }
    Ok(body.to_string())
}

/// How long an address that had a confirmation gets no other: a minute to 30 days.
pub fn reply_window_seconds(raw: i32) -> Result<i32, SettingError> {
    if (60..=30 * 86_400).contains(&raw) {
        Ok(raw)
    } else {
        Err(invalid(
            Setting::ReplyWindowSeconds,
            "must be from 60 to 2592000 (30 days)",
        ))
    }
}

/// The event types a destination receives: at least one, each once (stored in the
/// vocabulary's order).
pub fn events(raw: &[DestinationEvent]) -> Result<Vec<DestinationEvent>, SettingError> {
    if raw.is_empty() {
        return Err(invalid(
            Setting::Events,
            "must name at least one event type",
        ));
    }
    Ok(DestinationEvent::ALL
        .iter()
        .copied()
        .filter(|event| raw.contains(event))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_their_rules() {
        assert_eq!(name("  Contact  ").unwrap(), "Contact");
        assert!(name(" ").is_err());
        assert!(name(&"x".repeat(201)).is_err());
        assert_eq!(
            webhook_url(" https://example.com/h ", false).unwrap(),
            "https://example.com/h"
        );
        assert!(matches!(
            webhook_url("http://127.0.0.1/h", false),
            Err(SettingError::WebhookUrl(DestinationError::InternalAddress))
        ));
        assert!(redirect_url("https://example.com/thanks").is_ok());
        for bad in [
            "/thanks",
            "ftp://example.com",
            "https:///thanks",
            "https:/x",
        ] {
            assert!(redirect_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            allowed_origins(&[
                "https://Example.com".into(),
                "https://example.com/".into(),
                "http://localhost:3000".into()
            ])
            .unwrap(),
            ["https://example.com", "http://localhost:3000"]
        );
        assert!(allowed_origins(&["https://example.com/path".into()]).is_err());
        assert!(honeypot_field("website", 128).is_ok());
        assert!(honeypot_field("web\u{85}site", 128).is_err());
        assert!(honeypot_field("", 128).is_err());
        // A raised field-name limit does not let a name past the column's 128 characters.
        assert!(honeypot_field(&"h".repeat(128), 1024).is_ok());
        assert!(honeypot_field(&"h".repeat(129), 1024).is_err());
    }

    #[test]
    fn retention_days_from_zero_to_the_servers_cap() {
        for days in [0, 1, 30, 1_000_000] {
            assert_eq!(retention_days(Setting::RetentionDays, days), Ok(days));
        }
        for days in [-1, 1_000_001, i32::MAX] {
            assert!(matches!(
                retention_days(Setting::SpamRetentionDays, days),
                Err(SettingError::Invalid {
                    setting: Setting::SpamRetentionDays,
                    ..
                })
            ));
        }
    }

    #[test]
    fn honeypot_fields_are_plain_form_field_names() {
        for good in [
            "website",
            "W",
            "url2",
            "contact-fax",
            "contact_fax",
            "contact.fax",
            "contact[fax]",
            "a-_.[]9",
        ] {
            assert_eq!(honeypot_field(good, 128).unwrap(), good);
        }
        let refusal = SettingError::Invalid {
            setting: Setting::HoneypotField,
            reason: "must start with an ASCII letter and hold only ASCII letters, digits, '-', '_', '.', '[' and ']'",
        };
        for hostile in [
            "\"><img src=x onerror=alert(4)>",
            "a\"b",
            "a'b",
            "a<b",
            "a>b",
            "a&amp;b",
            "a b",
            "a\tb",
            "a/b",
            "a=b",
            "a`b",
            "1website",
            "-website",
            "_website",
            "[website]",
            ".website",
            "wébsite",
            "ｗebsite",
            "website\u{200b}",
            "",
        ] {
            assert_eq!(
                honeypot_field(hostile, 128),
                Err(refusal.clone()),
                "{hostile:?}"
            );
        }
        // The length limit is the field-name limit (and the column's), checked first.
        assert!(honeypot_field(&"h".repeat(8), 8).is_ok());
        assert_eq!(
            honeypot_field(&"h".repeat(9), 8),
            Err(SettingError::Invalid {
                setting: Setting::HoneypotField,
                reason: "must be no longer than a field name may be",
            })
        );
    }

    #[test]
    fn recipients_are_plain_distinct_ascii_addresses() {
        let list = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            recipients(&list(&[" owner@example.com ", "team@example.org"])),
            Ok(list(&["owner@example.com", "team@example.org"]))
        );
        let refused = |items: &[&str]| recipients(&list(items)).is_err();
        assert!(refused(&[]));
        assert!(refused(&["a@example.com"; 11]));
        assert!(
            refused(&["a@example.com", "A@Example.com"]),
            "twice, letter case aside"
        );
        for hostile in [
            "",
            "not-an-address",
            "Owner <owner@example.com>",
            "a@example.com, b@example.com",
            "a@example.com\r\nBcc: b@example.com",
            "a@example.com\nb@example.com",
            "a b@example.com",
            "ü@example.com",
            "a@exämple.com",
        ] {
            assert!(refused(&[hostile]), "{hostile:?}");
        }
        let long = format!("{}@example.com", "a".repeat(250));
        assert!(refused(&[long.as_str()]));
        assert_eq!(
            recipients(&list(&["a@example.com"; 10][..1])).map(|v| v.len()),
            Ok(1)
        );
    }

    #[test]
    fn destination_limits_and_events() {
        assert_eq!(max_in_flight(1), Ok(1));
        assert_eq!(max_in_flight(1000), Ok(1000));
        assert!(max_in_flight(0).is_err() && max_in_flight(1001).is_err());
        assert_eq!(max_requests_per_second(10_000), Ok(10_000));
        assert!(max_requests_per_second(0).is_err() && max_requests_per_second(-5).is_err());
        assert!(events(&[]).is_err());
        assert_eq!(
            events(&[
                DestinationEvent::SubmissionReceived,
                DestinationEvent::SubmissionReceived
            ]),
            Ok(vec![DestinationEvent::SubmissionReceived])
        );
    }

    #[test]
    fn a_rotation_keeps_the_old_secret_for_the_overlap_asked_or_the_default() {
        let now = chrono::Utc::now();
        let default = std::time::Duration::from_secs(3600);
        let asked = Rotation::new(Some(60), default, now).unwrap();
        assert_eq!(
            asked.previous_until,
            Some(now + chrono::Duration::seconds(60))
        );
        assert!(asked.secret.starts_with("whsec_"));
        let defaulted = Rotation::new(None, default, now).unwrap();
        assert_eq!(
            defaulted.previous_until,
            Some(now + chrono::Duration::hours(1))
        );
        assert_eq!(
            Rotation::new(Some(0), default, now).unwrap().previous_until,
            None
        );
        for wrong in [-1, MAX_OVERLAP_SECONDS + 1] {
            assert_eq!(
                Rotation::new(Some(wrong), default, now).unwrap_err(),
                invalid(
                    Setting::OverlapSeconds,
                    "must be from 0 to 2592000 (30 days)"
                )
            );
        }
    }
}
