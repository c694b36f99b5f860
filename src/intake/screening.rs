//! Screening a submission for spam, after the honeypot and before the outbox write
//! (docs/intake.md, "Spam"): the captcha (verified with its provider, within a timeout,
//! its token seen once), the endpoint's local rules, the form stamp (how soon after the
//! form was served it came back) and Akismet. A refused captcha answers an error and
//! stores nothing; everything else that judges a submission spam keeps it in the spam
//! folder, answered as an accepted one is, with no delivery.
//!
//! The local rules run on a blocking thread ([`RulesPool`]), never on the request's
//! async task: an operator's patterns over a large body take CPU time that would stall
//! every request sharing the runtime's worker. They have a time budget
//! (`FORMS_SPAM_SCREENING_BUDGET_SECONDS`); rules that give no verdict within it are
//! treated as a verifier that gave none, by the endpoint's `whenVerifierUnreachable`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::endpoint_cache::{IntakeEndpoint, Protection};
use crate::config::SpamConfig;
use crate::db::models::EndpointRow;
use crate::db::{self, Db};
use crate::error::{ApiError, CaptchaFailure, Verifier};
use crate::model::spam::{SpamRules, FORM_STAMP_FIELD};
use crate::model::state::{CaptchaProvider, WhenUnreachable};
use crate::outbound::{VerifierClient, VerifierError};

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
    rules_pool: RulesPool,
    client: tokio::sync::OnceCell<VerifierClient>,
    stamp_key: tokio::sync::OnceCell<Arc<[u8]>>,
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
            rules_pool: RulesPool::new(
                std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
            ),
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

    /// A form stamp for `endpoint_id` served at `now`: the seconds, a random nonce (so
    /// that every stamp served is another, and can be spent once) and their signature.
    pub async fn stamp(&self, endpoint_id: &str, now: DateTime<Utc>) -> Result<String, ApiError> {
        let key = self.stamp_key().await?;
        Ok(new_stamp(key, endpoint_id, now.timestamp()))
    }

    /// A form stamp for `endpoint_id` with a new nonce that keeps the time `earlier` was
    /// served: what the snippet asks for after each submission and when its page comes
    /// back from the back/forward cache, so that every submission from one page has a
    /// stamp of its own while the fill time still counts from when the page was served.
    /// An `earlier` that is not a valid, unexpired stamp of this endpoint (spent or not)
    /// gets a stamp served `now`, as without it.
    pub async fn renewed_stamp(
        &self,
        endpoint_id: &str,
        earlier: &str,
        now: DateTime<Utc>,
    ) -> Result<String, ApiError> {
        let key = self.stamp_key().await?;
        let max_age = i64::try_from(self.config.form_stamp_max_age.as_secs()).unwrap_or(i64::MAX);
        let served = signed_stamp(key, endpoint_id, earlier)
            .map(|(served, _)| served)
            .filter(|served| {
                let elapsed = now.timestamp().saturating_sub(*served);
                (-STAMP_CLOCK_SKEW_SECONDS..=max_age).contains(&elapsed)
            });
        Ok(new_stamp(
            key,
            endpoint_id,
            served.unwrap_or(now.timestamp()),
        ))
    }
}

/// A stamp served at `seconds` with a fresh nonce, signed.
fn new_stamp(key: &[u8], endpoint_id: &str, seconds: i64) -> String {
    let mut nonce = [0u8; STAMP_NONCE_BYTES];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut nonce);
    let nonce = hex::encode(nonce);
    format!(
        "{seconds}.{nonce}.{}",
        stamp_signature(key, endpoint_id, seconds, &nonce)
    )
}

/// The seconds and nonce of a stamp signed by `key` for this endpoint, in the current
/// format (with a nonce); `None` for anything else.
fn signed_stamp<'a>(key: &[u8], endpoint_id: &str, stamp: &'a str) -> Option<(i64, &'a str)> {
    let mut parts = stamp.splitn(3, '.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(seconds), Some(nonce), Some(signature))
            if nonce.len() == 2 * STAMP_NONCE_BYTES
                && nonce
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            seconds.parse::<i64>().ok().and_then(|seconds| {
                let expected = stamp_signature(key, endpoint_id, seconds, nonce);
                let equal: bool =
                    subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), signature.as_bytes()).into();
                equal.then_some((seconds, nonce))
            })
        }
        _ => None,
    }
}

/// The random bytes of a form stamp's nonce (lowercase hex in the stamp).
const STAMP_NONCE_BYTES: usize = 16;

/// The signature of a form stamp: HMAC-SHA-256 of `endpoint_id.seconds.nonce`, in hex.
fn stamp_signature(key: &[u8], endpoint_id: &str, seconds: i64, nonce: &str) -> String {
    crate::digest::hmac_sha256_hex(key, format!("{endpoint_id}.{seconds}.{nonce}").as_bytes())
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
        if !protection.rules.is_empty() {
            match self
                .judge_rules(endpoint.id.as_str(), &protection.rules, pairs)
                .await?
            {
                Some(found) => reasons.extend(found),
                None => {
                    crate::telemetry::meters::verifier_failed("screening");
                    tracing::warn!(
                        endpoint_id = %endpoint.id,
                        budget_seconds = self.config.screening_budget.as_secs_f64(),
                        "spam rules gave no verdict within their budget"
                    );
                    if let Some(reason) = unreachable(
                        protection,
                        Verifier::Screening,
                        "the spam rules did not finish in time",
                    )? {
                        reasons.push(reason);
                    }
                }
            }
        }
        let mut stamp_to_spend = None;
        if let Some(min) = protection.row.min_fill_seconds {
            let key = self.stamp_key().await?;
            let verdict = judge_stamp(
                key,
                endpoint.id.as_str(),
                stamp.as_deref(),
                min,
                self.config.form_stamp_max_age,
                now,
            );
            reasons.extend(verdict.reason);
            stamp_to_spend = verdict.spend;
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
        // The stamp is spent last, once no verifier can refuse the request any more: a
        // request refused by one (a 503 under `REFUSE`) keeps its stamp for its retry.
        // The first submission to spend it wins, in any process; any later one is spam.
        if let Some(StampToSpend { digest, until }) = stamp_to_spend {
            let first = self
                .db
                .run(async |conn| db::spam::spend_form_stamp(conn, &digest, until).await)
                .await?;
            if !first {
                reasons.push("form stamp used before".to_string());
            }
        }
        Ok(Screened {
            spam_reasons: reasons,
        })
    }

    /// The endpoint's rules over the values, on the rules' pool within the budget:
    /// `Ok(None)` when they gave no verdict in time. The values are copied for the
    /// thread, which may outlive this request's wait by one step of the rules.
    async fn judge_rules(
        &self,
        endpoint_id: &str,
        rules: &SpamRules,
        pairs: &[(String, String)],
    ) -> Result<Option<Vec<String>>, ApiError> {
        let rules = rules.clone();
        let values: Vec<String> = pairs.iter().map(|(_, value)| value.clone()).collect();
        self.rules_pool
            .run(endpoint_id, self.config.screening_budget, move |deadline| {
                rules
                    .judge_until(values.iter().map(String::as_str), Some(deadline))
                    .ok()
            })
            .await
    }

    /// How many submissions the rules are judging right now, on the rules' pool.
    #[cfg(any(test, feature = "testing"))]
    pub fn judging_now(&self) -> usize {
        self.rules_pool.running()
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
        let token = captcha_token(token.as_deref())?;
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
            .post_form(url, &[("secret", secret), ("response", token)])
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
        let url = self.config.akismet_call("comment-check");
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

/// The captcha token as it is verified and spent: the field's value without the ASCII
/// white space around it, which the providers ignore (so `t` and `t ` are one token, spent
/// once, not two). Missing when nothing is left; rejected without asking when it is
/// longer than [`MAX_TOKEN_BYTES`] or holds anything but visible ASCII (white space
/// inside included), which no provider's token does: a token has one spelling only.
fn captcha_token(token: Option<&str>) -> Result<&str, ApiError> {
    let token = token
        .map(|token| token.trim_matches(|c: char| c.is_ascii_whitespace()))
        .unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::CaptchaFailed {
            reason: CaptchaFailure::Missing,
        });
    }
    if token.len() > MAX_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::CaptchaFailed {
            reason: CaptchaFailure::Rejected,
        });
    }
    Ok(token)
}

/// What a form stamp says of a submission.
#[derive(Debug, PartialEq, Eq)]
struct StampVerdict {
    /// Why it makes the submission spam, if it does.
    reason: Option<String>,
    /// The stamp to spend: one signed for this endpoint and not expired, whether or not
    /// it came back too soon.
    spend: Option<StampToSpend>,
}

/// A stamp to record as spent: its digest, and until when (it is not accepted after).
#[derive(Debug, PartialEq, Eq)]
struct StampToSpend {
    digest: String,
    until: DateTime<Utc>,
}

/// Judges a form stamp: missing, not signed by `key` for this endpoint (or in the stamp
/// format of an earlier release, without a nonce), served more than `max_age` ago
/// (expired), or younger than `min_seconds`.
fn judge_stamp(
    key: &[u8],
    endpoint_id: &str,
    stamp: Option<&str>,
    min_seconds: i32,
    max_age: Duration,
    now: DateTime<Utc>,
) -> StampVerdict {
    let spam = |reason: &str| StampVerdict {
        reason: Some(reason.to_string()),
        spend: None,
    };
    let Some(stamp) = stamp.filter(|s| !s.is_empty()) else {
        return spam("no form stamp");
    };
    let Some((served, nonce)) = signed_stamp(key, endpoint_id, stamp) else {
        return spam("form stamp not valid");
    };
    let elapsed = now.timestamp().saturating_sub(served);
    if elapsed < -STAMP_CLOCK_SKEW_SECONDS {
        return spam("form stamp not valid");
    }
    let max_age = i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX);
    if elapsed > max_age {
        return spam("form stamp expired");
    }
    // Remembered until no process (their clocks a little apart) accepts it any more. The
    // digest is of the parsed stamp, so that another spelling of its seconds (`+…`,
    // leading zeros), which the signature would accept as well, is the same stamp.
    let until = served
        .saturating_add(max_age)
        .saturating_add(STAMP_CLOCK_SKEW_SECONDS);
    let spend = DateTime::<Utc>::from_timestamp(until, 0).map(|until| StampToSpend {
        digest: crate::digest::sha256_hex(format!("{endpoint_id}.{served}.{nonce}").as_bytes()),
        until,
    });
    if spend.is_none() {
        return spam("form stamp not valid");
    }
    let reason = (elapsed < i64::from(min_seconds)).then(|| {
        format!(
            "sent {} s after the form was served, under {min_seconds} s",
            elapsed.max(0)
        )
    });
    StampVerdict { reason, spend }
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
        let url = self
            .config
            .akismet_call(if spam { "submit-spam" } else { "submit-ham" });
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

/// Where the local rules run: tokio's blocking threads, at most `permits` at once, so
/// that a flood of submissions to an endpoint with costly rules takes neither the
/// runtime's workers nor every blocking thread. Waiting for a place counts against the
/// budget: a flood is answered by the endpoint's policy, not by a queue without end.
///
/// One endpoint holds at most all places but one at once (its share), so that however
/// many costly submissions one endpoint is sent, another endpoint's submission always
/// finds a place: a submission whose endpoint holds its share waits, within its budget,
/// for one of that endpoint's own judgements to end. The pool has two places at least.
struct RulesPool {
    permits: Arc<tokio::sync::Semaphore>,
    /// The most places one endpoint holds at once.
    share: usize,
    /// Each endpoint's share, while one of its submissions holds or waits for a place.
    shares: Arc<Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>>,
    running: Arc<AtomicUsize>,
}

/// An endpoint's shares are forgotten once none of its submissions needs them; past this
/// many endpoints, those left behind by a wait that was given up are swept.
const MAX_SHARES: usize = 1024;

impl RulesPool {
    fn new(permits: usize) -> RulesPool {
        let permits = permits.max(2);
        RulesPool {
            permits: Arc::new(tokio::sync::Semaphore::new(permits)),
            share: permits - 1,
            shares: Arc::new(Mutex::new(HashMap::new())),
            running: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The endpoint's share of the pool: its semaphore, made when first needed.
    fn share_of(&self, endpoint_id: &str) -> Arc<tokio::sync::Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = shares.get(endpoint_id) {
            return Arc::clone(share);
        }
        if shares.len() >= MAX_SHARES {
            // Only this map holds them: no submission holds or waits for a place.
            shares.retain(|_, share| Arc::strong_count(share) > 1);
        }
        let share = Arc::new(tokio::sync::Semaphore::new(self.share));
        shares.insert(endpoint_id.to_string(), Arc::clone(&share));
        share
    }

    #[cfg(any(test, feature = "testing"))]
    fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Runs `work` on a blocking thread once a place is free, and waits for it until
    /// `budget` from now: `Ok(None)` when the budget ran out first (or `work` answered
    /// `None`, having seen the deadline pass). `work` is handed the deadline, to stop
    /// at it; the place stays taken until it has.
    async fn run<T: Send + 'static>(
        &self,
        endpoint_id: &str,
        budget: Duration,
        work: impl FnOnce(Instant) -> Option<T> + Send + 'static,
    ) -> Result<Option<T>, ApiError> {
        let started = Instant::now();
        let deadline = started.checked_add(budget).unwrap_or(started);
        let permits = Arc::clone(&self.permits);
        let share = self.share_of(endpoint_id);
        let shares = Arc::clone(&self.shares);
        let endpoint_id = endpoint_id.to_string();
        let running = Arc::clone(&self.running);
        let attempt = async move {
            let closed = |_| ApiError::Internal("the spam rules' pool is closed".to_string());
            // The endpoint's share first: a submission of an endpoint that holds its
            // share takes no place another endpoint could have.
            let share = ShareHeld {
                permit: Some(share.acquire_owned().await.map_err(closed)?),
                shares,
                endpoint_id,
            };
            let permit = permits.acquire_owned().await.map_err(closed)?;
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let _share = share;
                let _running = Running::enter(running);
                work(deadline)
            })
            .await
            .map_err(|error| ApiError::Internal(format!("the spam rules failed: {error}")))
        };
        match tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Ok(None),
        }
    }
}

/// A place of an endpoint's share, until dropped; the last one dropped forgets the share.
struct ShareHeld {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    shares: Arc<Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>>,
    endpoint_id: String,
}

impl Drop for ShareHeld {
    fn drop(&mut self) {
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        // The permit holds the share too: given back first, the map's is then the only
        // one left when no other submission of the endpoint holds or waits for a place
        // (they take theirs under this lock).
        drop(self.permit.take());
        if shares
            .get(&self.endpoint_id)
            .is_some_and(|share| Arc::strong_count(share) == 1)
        {
            shares.remove(&self.endpoint_id);
        }
    }
}

/// Counts one judgement running, until dropped.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn enter(count: Arc<AtomicUsize>) -> Running {
        count.fetch_add(1, Ordering::SeqCst);
        Running(count)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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
    use crate::model::spam::SpamRules;

    /// Each way around the local rules found from outside, and the operator's rule
    /// written with the same tricks: text and rule are normalised alike before matching
    /// (docs/intake.md, "The rules").
    #[test]
    fn normalised_bypasses_are_caught() {
        let own = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        type Case<'a> = (
            &'a str,
            Option<i32>,
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
            &'a str,
            &'a str,
        );
        let cases: &[Case] = &[
            // (what, maxLinks, words, patterns, senders, submitted value, reason)
            (
                "underscore as a separator",
                None,
                &["viagra"],
                &[],
                &[],
                "buy_viagra now",
                "a blocked word",
            ),
            (
                "zero-width space",
                None,
                &["viagra"],
                &[],
                &[],
                "vi\u{200B}agra",
                "a blocked word",
            ),
            (
                "soft hyphen and word joiner",
                None,
                &["viagra"],
                &[],
                &[],
                "via\u{00AD}gr\u{2060}a",
                "a blocked word",
            ),
            (
                "Cyrillic a",
                None,
                &["viagra"],
                &[],
                &[],
                "vi\u{0430}gra",
                "a blocked word",
            ),
            (
                "Cyrillic capitals",
                None,
                &["viagra"],
                &[],
                &[],
                "V\u{0406}AGRA",
                "a blocked word",
            ),
            (
                "full-width letters",
                None,
                &["viagra"],
                &[],
                &[],
                "\u{FF56}\u{FF49}\u{FF41}\u{FF47}\u{FF52}\u{FF41}",
                "a blocked word",
            ),
            (
                "pattern: Cyrillic and zero-width",
                None,
                &[],
                &["^buy\\s+viagra"],
                &[],
                "buy v\u{0456}\u{200B}agra",
                "blocked pattern 1",
            ),
            (
                "pattern: full-width",
                None,
                &[],
                &["viagra"],
                &[],
                "\u{FF36}\u{FF29}AGRA",
                "blocked pattern 1",
            ),
            (
                "trailing-dot sender domain",
                None,
                &[],
                &[],
                &["spam.example"],
                "x@spam.example.",
                "blocked sender spam.example",
            ),
            (
                "full-width at sign and domain",
                None,
                &[],
                &[],
                &["spam.example"],
                "x\u{FF20}\u{FF53}pam.example",
                "blocked sender spam.example",
            ),
            (
                "zero-width in an address",
                None,
                &[],
                &[],
                &["bad@ok.example"],
                "bad\u{200B}@ok.example",
                "blocked sender bad@ok.example",
            ),
            (
                "full-width scheme",
                Some(0),
                &[],
                &[],
                &[],
                "\u{FF48}\u{FF54}\u{FF54}\u{FF50}\u{FF53}://a.com",
                "1 links, more than the 0 allowed",
            ),
            (
                "scheme-relative link",
                Some(0),
                &[],
                &[],
                &[],
                "see //a.com",
                "1 links, more than the 0 allowed",
            ),
            (
                "scheme-relative in markup",
                Some(1),
                &[],
                &[],
                &[],
                "<a href=//a.com>x</a> and https://b.com",
                "2 links, more than the 1 allowed",
            ),
            // The operator's rule is normalised as the text is.
            (
                "rule with a Cyrillic a",
                None,
                &["vi\u{0430}gra"],
                &[],
                &[],
                "viagra",
                "a blocked word",
            ),
            (
                "rule with full-width letters",
                None,
                &["\u{FF56}iagra"],
                &[],
                &[],
                "VIAGRA",
                "a blocked word",
            ),
            (
                "pattern with a Cyrillic a and a zero-width space",
                None,
                &[],
                &["vi\u{0430}\u{200B}gra+"],
                &[],
                "viagraaa",
                "blocked pattern 1",
            ),
            (
                "pattern class with a Cyrillic letter",
                None,
                &[],
                &["^[\u{0430}\u{0435}]+$"],
                &[],
                "\u{0430}e",
                "blocked pattern 1",
            ),
            (
                "pattern range of Cyrillic letters",
                None,
                &[],
                &["^[\u{0430}-\u{044F}]+$"],
                &[],
                "\u{043F}\u{0440}\u{0438}\u{0432}\u{0435}\u{0442}",
                "blocked pattern 1",
            ),
            (
                "precomposed accent",
                None,
                &["viagra"],
                &[],
                &[],
                "buy v\u{00ED}agra",
                "a blocked word",
            ),
            (
                "combining accent",
                None,
                &["viagra"],
                &[],
                &[],
                "buy v\u{0301}iagra",
                "a blocked word",
            ),
            (
                "combining accents on several letters",
                None,
                &["viagra"],
                &[],
                &[],
                "vi\u{0308}a\u{0300}gra\u{0327}",
                "a blocked word",
            ),
            (
                "word rule typed with an accent",
                None,
                &["v\u{00ED}agra"],
                &[],
                &[],
                "viagra",
                "a blocked word",
            ),
            (
                "pattern with an accented literal",
                None,
                &[],
                &["^v\u{00ED}agra$"],
                &[],
                "V\u{0301}IAGRA",
                "blocked pattern 1",
            ),
            (
                "accent on a Cyrillic look-alike",
                None,
                &["viagra"],
                &[],
                &[],
                "v\u{0457}agra",
                "a blocked word",
            ),
            (
                "Hangul syllables stay whole (their range is matched as written)",
                None,
                &[],
                &["^[\u{AC00}-\u{D7A3}]+$"],
                &[],
                "\u{C548}\u{B155}",
                "blocked pattern 1",
            ),
            (
                "sender rule with a root dot",
                None,
                &[],
                &[],
                &["spam.example."],
                "x@spam.example",
                "blocked sender spam.example",
            ),
        ];
        let mut failed = Vec::new();
        for (what, links, words, patterns, senders, value, reason) in cases {
            let rules = SpamRules::compile(*links, &own(words), &own(patterns), &own(senders))
                .expect("rules compile");
            let got = rules.judge([*value].into_iter());
            if got != vec![reason.to_string()] {
                failed.push(format!("{what}: {got:?}"));
            }
        }
        assert!(failed.is_empty(), "not caught: {failed:#?}");

        // What must still pass.
        let rules = SpamRules::compile(
            Some(1),
            &own(&["viagra", "casino"]),
            &own(&["(?-i)Buy"]),
            &own(&["spam.example"]),
        )
        .expect("rules compile");
        for value in [
            "casinos and occasion",
            "viagrafalls",
            "see https://a.example/x//y",
            "5 // 3",
            "x@notspam.example.",
            "\u{041F}\u{0440}\u{0438}\u{0432}\u{0435}\u{0442}",
            "buy",
            "v\u{00ED}agrafalls",
        ] {
            assert_eq!(
                rules.judge([value].into_iter()),
                Vec::<String>::new(),
                "{value}"
            );
        }
        assert_eq!(rules.judge(["Buy"].into_iter()), vec!["blocked pattern 1"]);
    }

    /// The rules' work runs on another thread: a task of this single-threaded runtime
    /// still runs while it does. Here the work waits for that task's signal; run on the
    /// runtime's own thread, it would wait out its bound and answer `false`.
    #[tokio::test(flavor = "current_thread")]
    async fn the_rules_run_off_the_runtime() {
        let pool = RulesPool::new(1);
        let (signal, signalled) = std::sync::mpsc::channel::<()>();
        let work = pool.run("contact", Duration::from_secs(60), move |_deadline| {
            Some(signalled.recv_timeout(Duration::from_secs(20)).is_ok())
        });
        let other_task = async {
            tokio::task::yield_now().await;
            signal.send(()).expect("the work is waiting");
        };
        let (outcome, ()) = tokio::join!(work, other_task);
        assert_eq!(outcome.expect("ran"), Some(true));
        assert_eq!(pool.running(), 0);
    }

    /// Past the budget the wait ends with no verdict, also while waiting for a place;
    /// the place stays taken until the work has seen its deadline and stopped.
    #[tokio::test(flavor = "current_thread")]
    async fn the_budget_bounds_the_wait_and_the_places() {
        let pool = RulesPool::new(1);
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (started, has_started) = tokio::sync::oneshot::channel::<()>();
        // Holds the only place until released (bounded: 20 s).
        let holder = pool.run("contact", Duration::from_millis(50), move |_deadline| {
            let _ = started.send(());
            released.recv_timeout(Duration::from_secs(20)).ok()
        });
        assert_eq!(
            holder.await.expect("ran"),
            None,
            "the budget ended the wait"
        );
        has_started.await.expect("the work started");
        assert_eq!(pool.running(), 1, "still running, its place taken");
        // No place: this one waits, and its budget ends first.
        let waiting = pool.run("contact", Duration::from_millis(50), |_deadline| Some(()));
        assert_eq!(waiting.await.expect("ran"), None);
        release.send(()).expect("the holder waits");
        // Once the place is given back, work runs again.
        let after = pool.run("contact", Duration::from_secs(60), |_deadline| Some(7));
        assert_eq!(after.await.expect("ran"), Some(7));
    }

    /// One endpoint's costly submissions hold at most its share of the places: another
    /// endpoint's submission is still judged while they run, and theirs waits.
    #[tokio::test(flavor = "current_thread")]
    async fn one_endpoint_cannot_take_every_place() {
        for places in [1, 2, 4] {
            let pool = RulesPool::new(places);
            let share = pool.share;
            let mut releases = Vec::new();
            let mut holders = Vec::new();
            for _ in 0..share {
                let (release, released) = std::sync::mpsc::channel::<()>();
                releases.push(release);
                // Each holds a place until released (bounded: 20 s).
                holders.push(
                    pool.run("flooded", Duration::from_secs(60), move |_deadline| {
                        released.recv_timeout(Duration::from_secs(20)).ok()
                    }),
                );
            }
            let check = async {
                while pool.running() < share {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                // The flooded endpoint holds its share: one more of its own waits, and
                // its (short) budget ends first...
                let more = pool.run("flooded", Duration::from_millis(50), |_deadline| Some(0));
                let more = more.await.expect("ran");
                // ...while another endpoint's submission finds a place and is judged.
                let other = pool.run("quiet", Duration::from_secs(60), |_deadline| Some(7));
                let other = other.await.expect("ran");
                for release in &releases {
                    let _ = release.send(());
                }
                (more, other)
            };
            let (held, (more, other)) =
                tokio::join!(futures_util::future::join_all(holders), check);
            assert_eq!(more, None, "{places} places");
            assert_eq!(other, Some(7), "{places} places");
            assert!(held.iter().all(|h| matches!(h, Ok(Some(())))));
            assert_eq!(pool.running(), 0);
            assert!(pool
                .shares
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty());
        }
    }

    #[test]
    fn a_captcha_token_has_one_spelling() {
        let token = |raw: Option<&str>| match captcha_token(raw) {
            Ok(token) => Ok(token.to_string()),
            Err(ApiError::CaptchaFailed { reason }) => Err(reason),
            Err(other) => panic!("{other:?}"),
        };
        for spelling in ["0.abc-_", "0.abc-_ ", " 0.abc-_", "\t0.abc-_\r\n"] {
            assert_eq!(
                token(Some(spelling)),
                Ok("0.abc-_".to_string()),
                "{spelling:?}"
            );
        }
        for missing in [None, Some(""), Some("  \n")] {
            assert_eq!(token(missing), Err(CaptchaFailure::Missing), "{missing:?}");
        }
        let long = "a".repeat(MAX_TOKEN_BYTES + 1);
        for rejected in ["0.a b", "0.a\u{0}b", "0.a\u{a0}", "0.é", long.as_str()] {
            assert_eq!(
                token(Some(rejected)),
                Err(CaptchaFailure::Rejected),
                "{rejected:?}"
            );
        }
    }

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
        let day = Duration::from_secs(86_400);
        let served = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).expect("time");
        let nonce = "0123456789abcdef0123456789abcdef";
        let stamp = format!(
            "1800000000.{nonce}.{}",
            stamp_signature(&key, "contact", 1_800_000_000, nonce)
        );
        let at = |seconds| served + chrono::Duration::seconds(seconds);
        let judge = |endpoint: &str, stamp: Option<&str>, now| {
            judge_stamp(&key, endpoint, stamp, 5, day, now)
        };
        let fine = judge("contact", Some(&stamp), at(5));
        assert_eq!(fine.reason, None);
        let spend = fine.spend.expect("a valid stamp is spent");
        assert_eq!(spend.until, at(86_400 + STAMP_CLOCK_SKEW_SECONDS));
        let soon = judge("contact", Some(&stamp), at(2));
        assert_eq!(
            soon.reason.as_deref(),
            Some("sent 2 s after the form was served, under 5 s")
        );
        assert_eq!(
            soon.spend.as_ref(),
            Some(&spend),
            "spent even when too soon"
        );
        // Another spelling of the same seconds is the same stamp.
        let zeros = format!("0{stamp}");
        assert_eq!(judge("contact", Some(&zeros), at(5)).spend, Some(spend));
        // A day and a second later it has expired, and is not spent.
        let late = judge("contact", Some(&stamp), at(86_401));
        assert_eq!(late.reason.as_deref(), Some("form stamp expired"));
        assert_eq!(late.spend, None);
        assert_eq!(judge("contact", Some(&stamp), at(86_400)).reason, None);
        let old_format = format!(
            "1800000000.{}",
            crate::digest::hmac_sha256_hex(&key, b"contact.1800000000")
        );
        let upper = stamp.replace(nonce, &nonce.to_uppercase());
        for bad in [
            "",
            "1800000000",
            "1800000000.00",
            "x.y",
            old_format.as_str(),
            upper.as_str(),
        ] {
            assert!(judge("contact", Some(bad), at(9)).reason.is_some(), "{bad}");
            assert!(judge("contact", Some(bad), at(9)).spend.is_none(), "{bad}");
        }
        // Another endpoint's stamp does not pass; from the future, it is not valid.
        assert_eq!(
            judge("other", Some(&stamp), at(9)).reason.as_deref(),
            Some("form stamp not valid")
        );
        assert_eq!(
            judge("contact", Some(&stamp), at(-61)).reason.as_deref(),
            Some("form stamp not valid")
        );
        assert_eq!(
            judge("contact", None, at(9)).reason.as_deref(),
            Some("no form stamp")
        );
    }
}
