//! OAuth2 client credentials (RFC 6749 4.4) for webhook receivers that want a bearer token
//! (docs/delivery.md, "OAuth2 client credentials"): tokens are asked for through the
//! webhook client's guarded HTTP client (client.rs: no redirects, no proxy, internal
//! addresses refused) and kept in this process's memory only, one per set of credentials,
//! until shortly before they expire. Concurrent attempts needing the same token wait for
//! one request rather than each sending their own. A token, a client secret or a token
//! endpoint's answer is never logged, recorded or stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use reqwest::header::HeaderValue;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// How much of a token endpoint's answer is read; a longer one is refused.
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;
/// A token's lifetime when the endpoint's answer has no `expires_in` (RFC 6749 5.1 makes
/// it optional): an hour, the common default; a 401 makes it fetched again sooner.
pub const DEFAULT_EXPIRES_IN: Duration = Duration::from_secs(3600);
/// A token is fetched again this long before it expires (or a tenth of its lifetime, when
/// that is shorter), so a request never leaves with one about to lapse.
const REFRESH_MARGIN: Duration = Duration::from_secs(30);
/// Past this many sets of credentials the cache is emptied of the expired ones first, and
/// of all if that is not enough: a bound on memory, at the cost of a fetch.
const MAX_CACHED: usize = 10_000;

/// A destination's client credentials, as claimed.
#[derive(Clone, Copy)]
pub struct ClientCredentials<'a> {
    pub token_url: &'a str,
    pub client_id: &'a str,
    pub client_secret: &'a str,
    pub scope: Option<&'a str>,
    pub audience: Option<&'a str>,
}

/// What a token is cached under: everything that makes the token endpoint answer for
/// another client or grant, the secret only by its digest.
#[derive(Clone, PartialEq, Eq, Hash)]
struct TokenKey {
    token_url: String,
    client_id: String,
    scope: Option<String>,
    audience: Option<String>,
    secret_digest: [u8; 32],
}

impl TokenKey {
    fn of(credentials: &ClientCredentials<'_>) -> TokenKey {
        TokenKey {
            token_url: credentials.token_url.to_string(),
            client_id: credentials.client_id.to_string(),
            scope: credentials.scope.map(str::to_string),
            audience: credentials.audience.map(str::to_string),
            secret_digest: Sha256::digest(credentials.client_secret.as_bytes()).into(),
        }
    }
}

/// A token and when it is fetched again.
struct CachedToken {
    authorization: HeaderValue,
    refresh_at: Instant,
}

type Slot = Arc<tokio::sync::Mutex<Option<CachedToken>>>;

/// The process's tokens, one slot per set of credentials; a slot's lock is held while its
/// token is fetched, so concurrent attempts wait for that one request.
#[derive(Default)]
pub struct TokenCache {
    slots: Mutex<HashMap<TokenKey, Slot>>,
}

/// Why no token could be had: a text naming the failure, never the answer's body or a
/// secret. The attempt fails as a network error with it (retried as a connection failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFailure(pub String);

impl TokenFailure {
    fn new(text: impl std::fmt::Display) -> TokenFailure {
        TokenFailure(format!("OAuth2 token endpoint: {text}"))
    }
}

impl TokenCache {
    fn slot(&self, key: TokenKey) -> Slot {
        // A poisoned map only means another thread panicked between two plain map
        // operations; the map itself is whole.
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= MAX_CACHED && !slots.contains_key(&key) {
            let now = Instant::now();
            slots.retain(|_, slot| {
                slot.try_lock()
                    .map(|token| token.as_ref().is_some_and(|t| t.refresh_at > now))
                    .unwrap_or(true)
            });
            if slots.len() >= MAX_CACHED {
                slots.clear();
            }
        }
        slots.entry(key).or_default().clone()
    }

    /// The `Authorization` value for `credentials`: the cached token while it is fresh and
    /// is not `rejected` (the one a receiver just answered 401 to), else a new one fetched
    /// with `fetch` (at most one fetch at a time per set of credentials).
    pub async fn authorization<F, Fut>(
        &self,
        credentials: &ClientCredentials<'_>,
        rejected: Option<&HeaderValue>,
        fetch: F,
    ) -> Result<HeaderValue, TokenFailure>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(HeaderValue, Duration), TokenFailure>>,
    {
        let slot = self.slot(TokenKey::of(credentials));
        let mut cached = slot.lock().await;
        if let Some(token) = cached.as_ref() {
            let fresh = token.refresh_at > Instant::now();
            if fresh && Some(&token.authorization) != rejected {
                return Ok(token.authorization.clone());
            }
        }
        *cached = None;
        let (authorization, expires_in) = fetch().await?;
        let margin = REFRESH_MARGIN.min(expires_in / 10);
        *cached = Some(CachedToken {
            authorization: authorization.clone(),
            refresh_at: Instant::now() + expires_in.saturating_sub(margin),
        });
        Ok(authorization)
    }
}

/// The token request's form body: `grant_type=client_credentials` and the scope and
/// audience when set (RFC 6749 4.4.2).
fn form_body(credentials: &ClientCredentials<'_>) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "client_credentials");
    if let Some(scope) = credentials.scope {
        form.append_pair("scope", scope);
    }
    if let Some(audience) = credentials.audience {
        form.append_pair("audience", audience);
    }
    form.finish()
}

/// HTTP Basic with the client id and secret, each form-urlencoded first (RFC 6749
/// 2.3.1), marked sensitive.
fn client_authorization(credentials: &ClientCredentials<'_>) -> Result<HeaderValue, TokenFailure> {
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!(
        "{}:{}",
        encode(credentials.client_id),
        encode(credentials.client_secret)
    );
    let mut value = HeaderValue::from_str(&format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
    .map_err(|_| TokenFailure::new("the client credentials do not make a header"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// A token endpoint's successful answer (RFC 6749 5.1); other members are ignored.
#[derive(serde::Deserialize)]
struct TokenResponse {
    access_token: String,
    token_type: Option<String>,
    expires_in: Option<serde_json::Value>,
}

/// `expires_in` as seconds: a number, or (as some endpoints send it) a string of one.
fn expires_in(value: Option<&serde_json::Value>) -> Result<Duration, TokenFailure> {
    let Some(value) = value else {
        return Ok(DEFAULT_EXPIRES_IN);
    };
    let seconds = match value {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match seconds {
        Some(s) if s.is_finite() && s >= 0.0 => {
            Ok(Duration::from_secs_f64(s.min(86_400.0 * 365.0)))
        }
        _ => Err(TokenFailure::new(
            "the answer's expires_in is not a number of seconds",
        )),
    }
}

/// Asks the token endpoint for a token through `http` (the guarded client): the
/// `Authorization` value it makes and how long it lives. The caller has checked the URL's
/// address literal; `classify` names a failed exchange.
pub(super) async fn fetch(
    http: &reqwest::Client,
    credentials: &ClientCredentials<'_>,
    classify: impl Fn(&reqwest::Error) -> String,
) -> Result<(HeaderValue, Duration), TokenFailure> {
    let response = http
        .post(credentials.token_url)
        .header(
            reqwest::header::AUTHORIZATION,
            client_authorization(credentials)?,
        )
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(reqwest::header::ACCEPT, "application/json")
        .body(form_body(credentials))
        .send()
        .await
        .map_err(|error| TokenFailure::new(classify(&error)))?;
    let status = response.status();
    if !status.is_success() {
        // The body may name the client or echo what was sent: never read into the record.
        return Err(TokenFailure::new(format!(
            "answered HTTP {}",
            status.as_u16()
        )));
    }
    let body = read_bounded(response).await?;
    let token: TokenResponse = serde_json::from_slice(&body).map_err(|_| {
        TokenFailure::new("the answer is not a JSON token response with an access_token")
    })?;
    if let Some(kind) = token.token_type.as_deref() {
        if !kind.eq_ignore_ascii_case("bearer") {
            return Err(TokenFailure::new(
                "the token is not a bearer token (token_type)",
            ));
        }
    }
    let lifetime = expires_in(token.expires_in.as_ref())?;
    let valid = !token.access_token.is_empty()
        && token.access_token.len() <= 8192
        && token.access_token.chars().all(|c| c.is_ascii_graphic());
    let authorization = valid
        .then(|| HeaderValue::from_str(&format!("Bearer {}", token.access_token)).ok())
        .flatten()
        .ok_or_else(|| {
            TokenFailure::new("the access_token is not 1 to 8192 visible ASCII characters")
        })?;
    let mut authorization = authorization;
    authorization.set_sensitive(true);
    Ok((authorization, lifetime))
}

/// The answer's body, refused past `MAX_TOKEN_RESPONSE_BYTES`.
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, TokenFailure> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
                    return Err(TokenFailure::new("the answer is longer than 64 KiB"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(error) if error.is_timeout() => {
                return Err(TokenFailure::new(
                    "read timeout: the answer did not come in time",
                ))
            }
            Err(_) => return Err(TokenFailure::new("the answer broke off")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> ClientCredentials<'static> {
        ClientCredentials {
            token_url: "https://auth.example.com/token",
            client_id: "id:1",
            client_secret: "s&cret",
            scope: Some("read write"),
            audience: None,
        }
    }

    #[test]
    fn the_request_is_form_encoded_with_basic_client_authentication() {
        assert_eq!(
            form_body(&credentials()),
            "grant_type=client_credentials&scope=read+write"
        );
        let header = client_authorization(&credentials()).expect("header");
        let encoded = header
            .to_str()
            .expect("ascii")
            .strip_prefix("Basic ")
            .expect("basic");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("base64");
        assert_eq!(decoded, b"id%3A1:s%26cret");
        assert!(header.is_sensitive());
    }

    #[test]
    fn lifetimes() {
        assert_eq!(expires_in(None), Ok(DEFAULT_EXPIRES_IN));
        assert_eq!(
            expires_in(Some(&serde_json::json!(120))),
            Ok(Duration::from_secs(120))
        );
        assert_eq!(
            expires_in(Some(&serde_json::json!("60"))),
            Ok(Duration::from_secs(60))
        );
        assert!(expires_in(Some(&serde_json::json!(-1))).is_err());
        assert!(expires_in(Some(&serde_json::json!({}))).is_err());
    }

    #[tokio::test]
    async fn a_token_is_reused_until_rejected_and_fetched_once_at_a_time() {
        let cache = Arc::new(TokenCache::default());
        let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let fetch = |fetches: Arc<std::sync::atomic::AtomicUsize>| async move {
            let n = fetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            let value = HeaderValue::from_str(&format!("Bearer t{n}"))
                .map_err(|_| TokenFailure::new("x"))?;
            Ok((value, Duration::from_secs(60)))
        };
        let mut waiting = Vec::new();
        for _ in 0..5 {
            let (cache, fetches) = (cache.clone(), fetches.clone());
            waiting.push(tokio::spawn(async move {
                cache
                    .authorization(&credentials(), None, || fetch(fetches))
                    .await
            }));
        }
        for task in waiting {
            assert_eq!(task.await.expect("joined").expect("token"), "Bearer t0");
        }
        assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 1);
        let rejected = HeaderValue::from_static("Bearer t0");
        let next = cache
            .authorization(&credentials(), Some(&rejected), || fetch(fetches.clone()))
            .await
            .expect("token");
        assert_eq!(next, "Bearer t1");
        // Another attempt rejected with the old token finds the new one already there.
        let again = cache
            .authorization(&credentials(), Some(&rejected), || fetch(fetches.clone()))
            .await
            .expect("token");
        assert_eq!(again, "Bearer t1");
        assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
