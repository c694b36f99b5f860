//! `FORMS_CAPTCHA_*`, `FORMS_AKISMET_*`, `FORMS_SPAM_RETENTION_DAYS`,
//! `FORMS_SPAM_SCREENING_BUDGET_SECONDS` (how long an endpoint's own rules may take),
//! `FORMS_FORM_STAMP_MAX_AGE_SECONDS` (how long a form stamp vouches for a submission):
//! the services that judge submissions and how long spam is kept (docs/intake.md,
//! "Spam"). Which endpoint
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
    /// Akismet's REST base (`…/1.1/`, always ending in `/`: [`akismet_base`] adds one
    /// where the setting has none), and the key; without a key no endpoint may use it.
    pub akismet_url: String,
    pub akismet_key: Option<Secret>,
    /// The longest the endpoint's local rules may take over one submission, waiting for
    /// a place among the screenings that run at once included; past it they gave no
    /// verdict, and the endpoint's `whenVerifierUnreachable` decides, as for a verifier.
    pub screening_budget: Duration,
    /// Submissions in the spam folder are deleted after this many days (0: kept).
    pub spam_retention_days: u32,
    /// A form stamp older than this no longer vouches for a minimum fill time; spent
    /// stamps are remembered this long (and then forgotten by the hourly upkeep).
    pub form_stamp_max_age: Duration,
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
        akismet_url: akismet_base(r, "https://rest.akismet.com/1.1/"),
        akismet_key: r.secret("FORMS_AKISMET_API_KEY", 8),
        screening_budget: r.seconds("FORMS_SPAM_SCREENING_BUDGET_SECONDS", 2.0),
        spam_retention_days: r.integer("FORMS_SPAM_RETENTION_DAYS", 30, 0, 1_000_000) as u32,
        // At least an hour, the longest minimum fill time an endpoint may set.
        form_stamp_max_age: Duration::from_secs(r.integer(
            "FORMS_FORM_STAMP_MAX_AGE_SECONDS",
            86_400,
            3_600,
            2_592_000,
        )),
    }
}

impl SpamConfig {
    /// The URL of one of Akismet's calls (`comment-check`, `submit-spam`,
    /// `submit-ham`): the base, which always ends in `/` (`akismet_base`), and the call.
    pub fn akismet_call(&self, call: &str) -> String {
        format!("{}{call}", self.akismet_url)
    }
}

/// `FORMS_AKISMET_URL`: an http(s) URL without query or fragment (the calls' names are
/// appended to it, which a query or fragment would swallow). Its path is a directory:
/// a missing final `/` is added, so `…/1.1` and `…/1.1/` are the same base and
/// `comment-check` goes to `…/1.1/comment-check` either way.
fn akismet_base(r: &mut Reader, default: &str) -> String {
    let Some(raw) = r.raw(AKISMET_URL) else {
        return default.to_string();
    };
    match Url::parse(raw.trim()) {
        Ok(mut url)
            if matches!(url.scheme(), "http" | "https")
                && url.host().is_some()
                && url.query().is_none()
                && url.fragment().is_none() =>
        {
            if !url.path().ends_with('/') {
                let path = format!("{}/", url.path());
                url.set_path(&path);
            }
            url.to_string()
        }
        _ => {
            r.fail(
                AKISMET_URL,
                format!(
                    "'{}' is not an http(s) URL without query or fragment",
                    shorten(&raw)
                ),
                "an http(s) URL without query or fragment, such as https://rest.akismet.com/1.1/ (a missing final / is added)",
            );
            default.to_string()
        }
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
