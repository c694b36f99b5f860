//! Screening a submission for spam, after the honeypot and before the outbox write
//! (docs/intake.md, "Spam"): the captcha (verified with its provider, within a timeout,
//! its token seen once), the endpoint's local rules, the form stamp (how soon after the
//! form was served it came back) and Akismet. A refused captcha answers an error and
//! stores nothing; everything else that judges a submission spam keeps it in the spam
//! folder, answered as an accepted one is, with no delivery.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::endpoint_cache::{IntakeEndpoint, Protection};
use crate::config::SpamConfig;
use crate::db::models::EndpointRow;
use crate::db::{self, Db};
use crate::delivery::client::{VerifierClient, VerifierError};
use crate::error::{ApiError, CaptchaFailure, Verifier};
use crate::model::spam::FORM_STAMP_FIELD;
use crate::model::state::{CaptchaProvider, WhenUnreachable};

/// The longest captcha token sent to a provider (theirs are about 2 KB); a longer one is
/// refused as not valid without asking.
const MAX_TOKEN_BYTES: usize = 8192;
/// A form stamp from further in the future than this (clocks of several processes) is
/// not valid.
const STAMP_CLOCK_SKEW_SECONDS: i64 = 60;
/// The name of the form stamps' key in `server_secrets`.
pub const FORM_STAMP_KEY: &str = "form_stamp";

/// What screening needs: where the services are, the client that asks them, and the key
/// that signs form stamps (shared by every process through the database). The client
/// and the key are made when first needed: a process whose forms use none of this never
/// builds them.
pub struct Screening {
    config: SpamConfig,
    db: Db,
    client: tokio::sync::OnceCell<VerifierClient>,
    stamp_key: tokio::sync::OnceCell<std::sync::Arc<[u8]>>,
}

/// The submission as screening saw it: what to store, and whether it is spam.
pub struct Screened {
    /// Why it is spam; empty: accepted.
    pub spam_reasons: Vec<String>,
}

impl Screening {
    pub fn new(config: SpamConfig, db: Db) -> Screening {
        Screening {
            config,
            db,
            client: tokio::sync::OnceCell::new(),
            stamp_key: tokio::sync::OnceCell::new(),
        }
    }

    async fn client(&self) -> Result<&VerifierClient, ApiError> {
        self.client
            .get_or_try_init(|| async { VerifierClient::new(self.config.verify_timeout) })
            .await
            .map_err(|error| {
                ApiError::Internal(format!("cannot build the verifier client: {error}"))
            })
    }

    /// The key of form stamps: the one in the database, made by the first process that
    /// needed it.
    async fn stamp_key(&self) -> Result<&[u8], ApiError> {
        let key = self
            .stamp_key
            .get_or_try_init(|| db::server_secrets::load(&self.db, FORM_STAMP_KEY))
            .await?;
        Ok(key)
    }

    /// A form stamp for `endpoint_id` served at `now`: the seconds and their signature.
    pub async fn stamp(&self, endpoint_id: &str, now: DateTime<Utc>) -> Result<String, ApiError> {
        let key = self.stamp_key().await?;
        let seconds = now.timestamp();
        Ok(format!(
            "{seconds}.{}",
            stamp_signature(key, endpoint_id, seconds)
        ))
    }
}

/// The signature of a form stamp: HMAC-SHA-256 of `endpoint_id.seconds`, in hex.
fn stamp_signature(key: &[u8], endpoint_id: &str, seconds: i64) -> String {
    crate::digest::hmac_sha256_hex(key, format!("{endpoint_id}.{seconds}").as_bytes())
}

impl Screening {
    /// Takes the screening fields out of `pairs` (the captcha's token, the form stamp:
    /// not the submitter's data, never stored) and judges the rest. `Err` for a refused
    /// captcha or an unreachable verifier under the refuse policy: nothing is stored.
    /// `skip`: the request names a stored submission by its idempotency key, whose
    /// verdict stands (a retry carries the token that was spent on the first request).
    pub async fn screen(
        &self,
        endpoint: &IntakeEndpoint,
        peer: IpAddr,
        user_agent: Option<&str>,
        pairs: &mut Vec<(String, String)>,
        now: DateTime<Utc>,
        skip: bool,
    ) -> Result<Screened, ApiError> {
        let stamp = take(pairs, FORM_STAMP_FIELD);
        let Some(protection) = &endpoint.protection else {
            return Ok(Screened {
                spam_reasons: Vec::new(),
            });
        };
        let token = protection.row.captcha_provider.and_then(|provider| {
            let token = take(pairs, provider.token_field());
            for field in provider.widget_fields() {
                take(pairs, field);
            }
            token
        });
        if skip {
            return Ok(Screened {
                spam_reasons: Vec::new(),
            });
        }
        let mut reasons = Vec::new();
        if let Some(provider) = protection.row.captcha_provider {
            if let Some(reason) = self
                .captcha(endpoint, protection, provider, token, now)
                .await?
            {
                reasons.push(reason);
            }
        }
        reasons.extend(
            protection
                .rules
                .judge(pairs.iter().map(|(_, value)| value.as_str())),
        );
        if let Some(min) = protection.row.min_fill_seconds {
            let key = self.stamp_key().await?;
            if let Some(reason) = judge_stamp(key, endpoint.id.as_str(), stamp.as_deref(), min, now)
            {
                reasons.push(reason);
            }
        }
        // Akismet is asked only about what nothing local judged already.
        if protection.row.akismet && reasons.is_empty() {
            if let Some(reason) = self
                .akismet(endpoint, protection, peer, user_agent, pairs)
                .await?
            {
                reasons.push(reason);
            }
        }
        Ok(Screened {
            spam_reasons: reasons,
        })
    }

    /// Verifies the token with the provider: `Ok(None)` solved, `Ok(Some(reason))` spam
    /// (a v3 score under the threshold; an unreachable provider under the spam policy).
    async fn captcha(
        &self,
        endpoint: &IntakeEndpoint,
        protection: &Protection,
        provider: CaptchaProvider,
        token: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, ApiError> {
        let Some(token) = token.filter(|t| !t.trim().is_empty()) else {
            return Err(ApiError::CaptchaFailed {
                reason: CaptchaFailure::Missing,
            });
        };
        if token.len() > MAX_TOKEN_BYTES {
            return Err(ApiError::CaptchaFailed {
                reason: CaptchaFailure::Rejected,
            });
        }
        let secret = protection.row.captcha_secret.as_deref().unwrap_or_default();
        let url = match provider {
            CaptchaProvider::Turnstile => &self.config.turnstile_url,
            CaptchaProvider::Hcaptcha => &self.config.hcaptcha_url,
            CaptchaProvider::RecaptchaV2 | CaptchaProvider::RecaptchaV3 => {
                &self.config.recaptcha_url
            }
        };
        // The client's address is not sent: the providers take it as optional, and this
        // service passes raw addresses to no one it need not.
        let answer = self
            .client()
            .await?
            .post_form(url, &[("secret", secret), ("response", &token)])
            .await
            .and_then(|body| {
                serde_json::from_slice::<CaptchaAnswer>(&body)
                    .map_err(|_| VerifierError::Status(200))
            });
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                crate::telemetry::meters::verifier_failed("captcha");
                tracing::warn!(
                    provider = provider.as_str(),
                    endpoint_id = %endpoint.id,
                    error = %error,
                    "captcha provider unusable"
                );
                return unreachable(
                    protection,
                    Verifier::Captcha,
                    "the captcha provider could not be reached",
                );
            }
        };
        if !answer.success {
            return Err(ApiError::CaptchaFailed {
                reason: CaptchaFailure::Rejected,
            });
        }
        // A token the provider accepted is recorded as spent; the first submission to
        // record it wins, in any process, and any later one is refused. Recorded only
        // once the provider accepted it, so that tokens made up by the thousand cost no
        // write here (the provider refuses them, and the providers refuse a replay too).
        let digest = hex::encode(Sha256::digest(token.as_bytes()));
        let first = self
            .db
            .run(async |conn| db::spam::first_sight_of_token(conn, &digest, now).await)
            .await?;
        if !first {
            return Err(ApiError::CaptchaFailed {
                reason: CaptchaFailure::Reused,
            });
        }
        if !hostname_allowed(endpoint, answer.hostname.as_deref()) {
            return Err(ApiError::CaptchaFailed {
                reason: CaptchaFailure::Hostname,
            });
        }
        if provider == CaptchaProvider::RecaptchaV3 {
            let threshold = protection.row.captcha_min_score.unwrap_or(0.5);
            match answer.score {
                Some(score) if score >= f64::from(threshold) => {}
                Some(score) => {
                    return Ok(Some(format!(
                        "captcha score {score:.1} under {threshold:.1}"
                    )))
                }
                None => return Ok(Some("captcha answer without a score".to_string())),
            }
        }
        Ok(None)
    }

    /// Akismet's `comment-check`: `Ok(Some(reason))` spam.
    async fn akismet(
        &self,
        endpoint: &IntakeEndpoint,
        protection: &Protection,
        peer: IpAddr,
        user_agent: Option<&str>,
        pairs: &[(String, String)],
    ) -> Result<Option<String>, ApiError> {
        let Some(key) = &self.config.akismet_key else {
            // Refused when set (setSpamProtection), so only a key removed since.
            return unreachable(
                protection,
                Verifier::Akismet,
                "no Akismet key is configured",
            );
        };
        let blog = endpoint
            .allowed_origins()
            .next()
            .unwrap_or_default()
            .to_string();
        let url = format!("{}comment-check", self.config.akismet_url);
        let ip = peer.to_string();
        let comment = AkismetComment::from_pairs(pairs);
        let mut form: Vec<(&str, &str)> = vec![
            ("api_key", key.expose()),
            ("blog", &blog),
            ("user_ip", &ip),
            ("comment_type", "contact-form"),
            ("comment_content", &comment.content),
        ];
        if let Some(agent) = user_agent {
            form.push(("user_agent", agent));
        }
        if let Some(author) = &comment.author {
            form.push(("comment_author", author));
        }
        if let Some(email) = &comment.email {
            form.push(("comment_author_email", email));
        }
        match self.client().await?.post_form(&url, &form).await {
            Ok(body) if body.as_ref() == b"true" => Ok(Some("Akismet".to_string())),
            Ok(body) if body.as_ref() == b"false" => Ok(None),
            outcome => {
                crate::telemetry::meters::verifier_failed("akismet");
                let error = match outcome {
                    Err(error) => error.to_string(),
                    // "invalid" (a bad key) or anything else: not a verdict.
                    Ok(_) => "an answer that is not a verdict".to_string(),
                };
                tracing::warn!(endpoint_id = %endpoint.id, error = %error, "Akismet unusable");
                unreachable(
                    protection,
                    Verifier::Akismet,
                    "Akismet could not be reached",
                )
            }
        }
    }
}

/// Why a form stamp makes a submission spam, if it does: missing, not signed by `key`
/// for this endpoint, or younger than `min_seconds`.
fn judge_stamp(
    key: &[u8],
    endpoint_id: &str,
    stamp: Option<&str>,
    min_seconds: i32,
    now: DateTime<Utc>,
) -> Option<String> {
    let Some(stamp) = stamp.filter(|s| !s.is_empty()) else {
        return Some("no form stamp".to_string());
    };
    let valid = stamp.split_once('.').and_then(|(seconds, signature)| {
        let seconds: i64 = seconds.parse().ok()?;
        let expected = stamp_signature(key, endpoint_id, seconds);
        let equal: bool =
            subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), signature.as_bytes()).into();
        equal.then_some(seconds)
    });
    let Some(served) = valid else {
        return Some("form stamp not valid".to_string());
    };
    let elapsed = now.timestamp() - served;
    if elapsed < -STAMP_CLOCK_SKEW_SECONDS {
        return Some("form stamp not valid".to_string());
    }
    (elapsed < i64::from(min_seconds)).then(|| {
        format!(
            "sent {} s after the form was served, under {min_seconds} s",
            elapsed.max(0)
        )
    })
}

impl Screening {
    /// Reports an operator's verdict to Akismet (`submit-spam`, `submit-ham`) for a
    /// submission of `endpoint`. The client's address and user agent are not kept, so
    /// they are not sent. A report that fails is logged and counted; the verdict stands.
    pub async fn report(&self, endpoint: &EndpointRow, fields: &serde_json::Value, spam: bool) {
        let Some(key) = &self.config.akismet_key else {
            return;
        };
        let Ok(client) = self.client().await else {
            crate::telemetry::meters::verifier_failed("akismet");
            return;
        };
        let pairs: Vec<(String, String)> = fields
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(name, values)| {
                values
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(|v| (name.clone(), v.to_string())))
            })
            .collect();
        let comment = AkismetComment::from_pairs(&pairs);
        let blog = endpoint
            .allowed_origins()
            .next()
            .unwrap_or_default()
            .to_string();
        let url = format!(
            "{}{}",
            self.config.akismet_url,
            if spam { "submit-spam" } else { "submit-ham" }
        );
        let mut form: Vec<(&str, &str)> = vec![
            ("api_key", key.expose()),
            ("blog", &blog),
            ("comment_type", "contact-form"),
            ("comment_content", &comment.content),
        ];
        if let Some(author) = &comment.author {
            form.push(("comment_author", author));
        }
        if let Some(email) = &comment.email {
            form.push(("comment_author_email", email));
        }
        if let Err(error) = client.post_form(&url, &form).await {
            crate::telemetry::meters::verifier_failed("akismet");
            tracing::warn!(endpoint_id = %endpoint.id, error = %error, "cannot report a verdict to Akismet");
        }
    }
}

/// The endpoint's policy for a verifier that gave no verdict: refuse, or the spam folder.
fn unreachable(
    protection: &Protection,
    verifier: Verifier,
    reason: &str,
) -> Result<Option<String>, ApiError> {
    match protection.row.when_unreachable {
        WhenUnreachable::Refuse => Err(ApiError::VerifierUnavailable { verifier }),
        WhenUnreachable::Spam => Ok(Some(reason.to_string())),
    }
}

/// The provider's answer, as all four spell it (`siteverify`).
#[derive(Deserialize)]
struct CaptchaAnswer {
    success: bool,
    #[serde(default)]
    hostname: Option<String>,
    /// reCAPTCHA v3 only.
    #[serde(default)]
    score: Option<f64>,
}

/// The host the captcha was solved on is one of the endpoint's allowed origins' hosts;
/// any host when it lists none (it takes forms from anywhere).
fn hostname_allowed(endpoint: &IntakeEndpoint, hostname: Option<&str>) -> bool {
    let mut origins = endpoint.allowed_origins().peekable();
    if origins.peek().is_none() {
        return true;
    }
    let Some(hostname) = hostname else {
        return false;
    };
    origins.any(|origin| {
        url::Url::parse(origin)
            .ok()
            .and_then(|url| {
                url.host_str()
                    .map(|host| host.eq_ignore_ascii_case(hostname))
            })
            .unwrap_or(false)
    })
}

/// Removes every value of `name`, answering the first.
fn take(pairs: &mut Vec<(String, String)>, name: &str) -> Option<String> {
    let mut first = None;
    pairs.retain_mut(|(field, value)| {
        if field != name {
            return true;
        }
        if first.is_none() {
            first = Some(std::mem::take(value));
        }
        false
    });
    first
}

/// A submission as Akismet reads a comment: the author's name and address from the
/// usual fields, the other values as its text.
struct AkismetComment {
    author: Option<String>,
    email: Option<String>,
    content: String,
}

impl AkismetComment {
    fn from_pairs(pairs: &[(String, String)]) -> AkismetComment {
        let named = |names: &[&str]| {
            pairs
                .iter()
                .find(|(field, _)| names.iter().any(|n| field.eq_ignore_ascii_case(n)))
                .map(|(_, value)| value.clone())
        };
        let author = named(&["name", "full_name", "your-name"]);
        let email = named(&["email", "e-mail", "your-email", "_replyto"]);
        let content = pairs
            .iter()
            .filter(|(_, value)| Some(value) != author.as_ref() && Some(value) != email.as_ref())
            .map(|(_, value)| value.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        AkismetComment {
            author,
            email,
            content,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_removes_every_value_and_answers_the_first() {
        let mut pairs = vec![
            ("a".to_string(), "1".to_string()),
            ("t".to_string(), "x".to_string()),
            ("t".to_string(), "y".to_string()),
        ];
        assert_eq!(take(&mut pairs, "t").as_deref(), Some("x"));
        assert_eq!(pairs, vec![("a".to_string(), "1".to_string())]);
        assert_eq!(take(&mut pairs, "t"), None);
    }

    #[test]
    fn a_stamp_is_signed_for_its_endpoint_and_judged_by_its_age() {
        let key = [7u8; 32];
        let served = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).expect("time");
        let stamp = format!(
            "1800000000.{}",
            stamp_signature(&key, "contact", 1_800_000_000)
        );
        let at = |seconds| served + chrono::Duration::seconds(seconds);
        assert_eq!(judge_stamp(&key, "contact", Some(&stamp), 5, at(5)), None);
        assert_eq!(
            judge_stamp(&key, "contact", Some(&stamp), 5, at(2)).as_deref(),
            Some("sent 2 s after the form was served, under 5 s")
        );
        for bad in ["", "1800000000", "1800000000.00", "x.y"] {
            assert!(judge_stamp(&key, "contact", Some(bad), 5, at(9)).is_some());
        }
        // Another endpoint's stamp does not pass.
        assert_eq!(
            judge_stamp(&key, "other", Some(&stamp), 5, at(9)).as_deref(),
            Some("form stamp not valid")
        );
        assert_eq!(
            judge_stamp(&key, "contact", None, 5, at(9)).as_deref(),
            Some("no form stamp")
        );
    }
}
