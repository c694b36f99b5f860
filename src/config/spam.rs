//! `FORMS_CAPTCHA_*`, `FORMS_AKISMET_*`, `FORMS_SPAM_RETENTION_DAYS`: the services that
//! judge submissions and how long spam is kept (docs/intake.md, "Spam"). Which endpoint
//! uses which is an endpoint's setting; these say where the services are.

use std::time::Duration;

use url::Url;

use super::reader::{shorten, Reader};
use super::Secret;

#[derive(Debug, Clone)]
pub struct SpamConfig {
    /// Each provider's verification URL (`siteverify`): pointed elsewhere for tests and
    /// compatible self-hosted services.
    pub turnstile_url: String,
    pub hcaptcha_url: String,
    pub recaptcha_url: String,
    /// The longest a verification (captcha, Akismet) may take, connection included.
    pub verify_timeout: Duration,
    /// Akismet's REST base (`…/1.1/`), and the key; without a key no endpoint may use it.
    pub akismet_url: String,
    pub akismet_key: Option<Secret>,
    /// Submissions in the spam folder are deleted after this many days (0: kept).
    pub spam_retention_days: u32,
}

const TURNSTILE_URL: &str = "FORMS_CAPTCHA_TURNSTILE_VERIFY_URL";
const HCAPTCHA_URL: &str = "FORMS_CAPTCHA_HCAPTCHA_VERIFY_URL";
const RECAPTCHA_URL: &str = "FORMS_CAPTCHA_RECAPTCHA_VERIFY_URL";
const AKISMET_URL: &str = "FORMS_AKISMET_URL";

pub(super) fn read(r: &mut Reader) -> SpamConfig {
    SpamConfig {
        turnstile_url: url(
            r,
            TURNSTILE_URL,
            "https://challenges.cloudflare.com/turnstile/v0/siteverify",
        ),
        hcaptcha_url: url(r, HCAPTCHA_URL, "https://api.hcaptcha.com/siteverify"),
        recaptcha_url: url(
            r,
            RECAPTCHA_URL,
            "https://www.google.com/recaptcha/api/siteverify",
        ),
        verify_timeout: r.seconds("FORMS_CAPTCHA_VERIFY_TIMEOUT_SECONDS", 5.0),
        akismet_url: url(r, AKISMET_URL, "https://rest.akismet.com/1.1/"),
        akismet_key: r.secret("FORMS_AKISMET_API_KEY", 8),
        spam_retention_days: r.integer("FORMS_SPAM_RETENTION_DAYS", 30, 0, 1_000_000) as u32,
    }
}

/// An http(s) URL, or the service's own.
fn url(r: &mut Reader, name: &'static str, default: &str) -> String {
    let Some(raw) = r.raw(name) else {
        return default.to_string();
    };
    match Url::parse(raw.trim()) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            url.to_string()
        }
        _ => {
            r.fail(
                name,
                format!("'{}' is not an http(s) URL", shorten(&raw)),
                "an http(s) URL",
            );
            default.to_string()
        }
    }
}
