//! The webhook client: the one place a receiver is called.
//!
//! - Redirects are never followed; no system proxy is used.
//! - Connect timeout and an overall limit of connect + read timeout, so a request always
//!   ends well inside the lease.
//! - Host names are resolved through `outbound::GuardedResolver`, which drops every
//!   internal address; address literals are checked before the request.
//!   `FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS=true` lifts both checks.
//! - At most a small prefix of the response body is read, then the connection is dropped.
//! - A receiver asking for OAuth2 client credentials gets a bearer token fetched from its
//!   token endpoint through the same guards (oauth.rs), cached by the process; one asking
//!   for a client certificate (mTLS) or trusting a CA of its own is called through a
//!   client built for that identity, with the same guards, kept while it is used.
//! - With either, everything one attempt does (the token, the request, one more token and
//!   request after a 401) ends within connect + read timeout, the request budget the
//!   worker's lease is checked against.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderValue;
use sha2::{Digest, Sha256};
use url::{Host, Url};

use super::oauth::{self, ClientCredentials, TokenCache, TokenFailure};
use super::outcome::{AttemptResult, Outcome};
use super::payload::SignatureHeaders;
use crate::config::WebhookConfig;
use crate::model::destination::host_is_internal;
use crate::outbound::{GuardedResolver, NameResolver, RefusedDestination, UnresolvedName};

/// A header a receiver asked for (its own static headers, its `Authorization`); a
/// sensitive one's value is kept out of any debug output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverHeader {
    pub name: String,
    pub value: String,
    pub sensitive: bool,
}

/// How much of a response body is read before the connection is dropped.
const RESPONSE_PREFIX_BYTES: usize = 4096;

/// A receiver's TLS settings, as claimed: a client certificate (chain) with its key, and
/// extra CA certificates, all PEM (checked when set, model/client_tls.rs).
#[derive(Clone, Copy, Default)]
pub struct ReceiverTls<'a> {
    pub identity: Option<(&'a str, &'a str)>,
    pub ca: Option<&'a str>,
}

/// How a request proves who sends it beyond its headers: OAuth2 client credentials and
/// TLS settings of its receiver's own.
#[derive(Clone, Copy, Default)]
pub struct ReceiverCredentials<'a> {
    pub oauth2: Option<ClientCredentials<'a>>,
    pub tls: ReceiverTls<'a>,
}

/// Clients built for a TLS identity or CA are kept for this many distinct settings; past
/// it the map starts again (a bound on memory, at the cost of new connections).
const MAX_TLS_CLIENTS: usize = 1000;

#[derive(Clone)]
pub struct WebhookClient {
    http: reqwest::Client,
    allow_private: bool,
    /// The request budget: connect + read timeout.
    budget: Duration,
    connect_timeout: Duration,
    resolver: Arc<dyn NameResolver>,
    /// OAuth2 tokens, shared by every clone (the process makes one client).
    tokens: Arc<TokenCache>,
    /// Clients for a receiver's TLS settings, by the digest of those settings.
    tls_clients: Arc<Mutex<HashMap<[u8; 32], reqwest::Client>>>,
}

impl WebhookClient {
    pub fn new(
        config: &WebhookConfig,
        resolver: Arc<dyn NameResolver>,
    ) -> Result<Self, reqwest::Error> {
        let mut client = WebhookClient {
            http: reqwest::Client::new(),
            allow_private: config.allow_private_targets,
            budget: config.connect_timeout + config.read_timeout,
            connect_timeout: config.connect_timeout,
            resolver,
            tokens: Arc::default(),
            tls_clients: Arc::default(),
        };
        client.http = client.builder().build()?;
        Ok(client)
    }

    /// Every client's guards: no redirects, no proxy, the timeouts, the guarded resolver.
    fn builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(self.connect_timeout)
            .timeout(self.budget)
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("Hymical-Forms/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(GuardedResolver {
                inner: self.resolver.clone(),
                allow_private: self.allow_private,
            }))
    }

    /// The client for a receiver's TLS settings: the shared one without any, else one
    /// built for them (kept for the next attempt).
    fn client_for(&self, tls: &ReceiverTls<'_>) -> Result<reqwest::Client, AttemptResult> {
        if tls.identity.is_none() && tls.ca.is_none() {
            return Ok(self.http.clone());
        }
        let mut digest = Sha256::new();
        for part in [
            tls.identity.map(|(certificate, _)| certificate),
            tls.identity.map(|(_, key)| key),
            tls.ca,
        ] {
            // Lengths first, so that no two different settings hash the same bytes.
            let part = part.unwrap_or("");
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part.as_bytes());
        }
        let digest: [u8; 32] = digest.finalize().into();
        let mut clients = self
            .tls_clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(&digest) {
            return Ok(client.clone());
        }
        // Checked when set (model/client_tls.rs); a stored one that no longer loads is
        // retried as a connection that could not be made, and says which part.
        let unusable = |what: &str| {
            AttemptResult::failure(
                Outcome::NetworkError,
                format!("the destination's {what} could not be loaded for TLS"),
            )
        };
        let mut builder = self.builder();
        if let Some((certificate, key)) = tls.identity {
            let identity =
                reqwest::Identity::from_pem(format!("{certificate}\n{key}\n").as_bytes())
                    .map_err(|_| unusable("client certificate and key"))?;
            builder = builder.identity(identity);
        }
        if let Some(ca) = tls.ca {
            let roots = reqwest::Certificate::from_pem_bundle(ca.as_bytes())
                .map_err(|_| unusable("CA certificates"))?;
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        let client = builder.build().map_err(|_| unusable("TLS settings"))?;
        if clients.len() >= MAX_TLS_CLIENTS {
            clients.clear();
        }
        clients.insert(digest, client.clone());
        Ok(client)
    }

    /// A bearer token for `credentials` (the cached one unless it is `rejected`), asked
    /// for through the guarded client; within the attempt's `deadline`.
    async fn token(
        &self,
        credentials: &ClientCredentials<'_>,
        rejected: Option<&HeaderValue>,
        deadline: tokio::time::Instant,
    ) -> Result<HeaderValue, AttemptResult> {
        let fetch = || async {
            if let Err(refused) = checked_url(credentials.token_url, self.allow_private) {
                let text = refused
                    .error
                    .as_deref()
                    .unwrap_or("the token URL is refused");
                return Err(TokenFailure(format!("OAuth2 token endpoint: {text}")));
            }
            oauth::fetch(&self.http, credentials, |error| {
                classify(error).1.to_string()
            })
            .await
        };
        let token = self.tokens.authorization(credentials, rejected, fetch);
        match tokio::time::timeout_at(deadline, token).await {
            Ok(Ok(authorization)) => Ok(authorization),
            // A token that cannot be had is a connection to the receiver that cannot be
            // made: retried on the schedule, whatever the token endpoint said.
            Ok(Err(TokenFailure(text))) => Err(AttemptResult::failure(Outcome::NetworkError, text)),
            Err(_) => Err(AttemptResult::failure(
                Outcome::NetworkError,
                "OAuth2 token endpoint: no token within the request timeout",
            )),
        }
    }

    /// Sends one signed delivery, with the headers its receiver asked for, its OAuth2
    /// client credentials and TLS settings (none: `ReceiverCredentials::default()`) and,
    /// when traces are on, the attempt's W3C `traceparent`, and classifies what happened.
    /// A receiver answering 401 to a cached token is sent the request once more, with a
    /// token fetched again, in the same attempt. Never panics, never returns the response
    /// body.
    pub async fn send(
        &self,
        destination: &str,
        body: Vec<u8>,
        signatures: &SignatureHeaders,
        receiver: &[ReceiverHeader],
        trace_parent: Option<&str>,
        credentials: &ReceiverCredentials<'_>,
    ) -> AttemptResult {
        let deadline = tokio::time::Instant::now() + self.budget;
        let url = match checked_url(destination, self.allow_private) {
            Ok(url) => url,
            Err(refused) => return refused,
        };
        let http = match self.client_for(&credentials.tls) {
            Ok(http) => http,
            Err(unusable) => return unusable,
        };
        let mut request = http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        // Which signing headers a request carries is the signer's decision
        // (payload::sign, by the kind of request), not the client's.
        for (name, value) in signatures.headers() {
            request = request.header(name, value);
        }
        // The receiver's own headers were checked when set (model/receiver.rs); one that
        // does not convert is refused rather than sent without.
        for header in receiver {
            let Ok(mut value) = HeaderValue::from_str(&header.value) else {
                return AttemptResult::failure(
                    Outcome::BlockedDestination,
                    "a header of the destination is not a valid HTTP header",
                );
            };
            value.set_sensitive(header.sensitive);
            request = request.header(header.name.as_str(), value);
        }
        // The receiver may not set it itself (model/receiver.rs refuses the name), so it
        // is this attempt's context or absent. Made by the propagator from ids alone, it
        // always converts; should it not, the request goes without rather than not at all.
        if let Some(value) = trace_parent.and_then(|value| HeaderValue::from_str(value).ok()) {
            request = request.header(crate::telemetry::traces::TRACEPARENT, value);
        }
        let request = request.body(body);
        let Some(oauth2) = credentials.oauth2 else {
            return answered(request.send().await).await;
        };
        let token = match self.token(&oauth2, None, deadline).await {
            Ok(token) => token,
            Err(failed) => return failed,
        };
        // Kept for a second try: a body in memory always clones.
        let again = request.try_clone();
        let first = timed(deadline, request.bearer(&token)).await;
        let (Some(again), Ok(response)) = (again, &first) else {
            return answered(first).await;
        };
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            return answered(first).await;
        }
        // The receiver no longer takes the token (revoked, rotated, expired early): one
        // more, fetched now unless another attempt already did, and the request again.
        drop(first);
        let token = match self.token(&oauth2, Some(&token), deadline).await {
            Ok(token) => token,
            Err(failed) => return failed,
        };
        answered(timed(deadline, again.bearer(&token)).await).await
    }
}

/// A request's `Authorization: Bearer`, marked sensitive.
trait Bearer {
    fn bearer(self, authorization: &HeaderValue) -> Self;
}

impl Bearer for reqwest::RequestBuilder {
    fn bearer(self, authorization: &HeaderValue) -> Self {
        let mut value = authorization.clone();
        value.set_sensitive(true);
        self.header(reqwest::header::AUTHORIZATION, value)
    }
}

/// Sends `request`, ending it at the attempt's `deadline` (as reqwest's own timeout ends
/// it, a timeout).
async fn timed(
    deadline: tokio::time::Instant,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, Sent> {
    match tokio::time::timeout_at(deadline, request.send()).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(error)) => Err(Sent::Failed(error)),
        Err(_) => Err(Sent::OutOfTime),
    }
}

/// Why a request has no answer.
enum Sent {
    Failed(reqwest::Error),
    /// The attempt's budget ran out (after a token was fetched).
    OutOfTime,
}

impl From<reqwest::Error> for Sent {
    fn from(error: reqwest::Error) -> Self {
        Sent::Failed(error)
    }
}

/// A URL a request may go to: http(s), and no internal address literal unless allowed
/// (names are checked by the resolver, which literals never reach).
fn checked_url(destination: &str, allow_private: bool) -> Result<Url, AttemptResult> {
    let url = match Url::parse(destination) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => url,
        _ => {
            return Err(AttemptResult::failure(
                Outcome::BlockedDestination,
                "the destination URL is not a valid http(s) URL",
            ))
        }
    };
    let literal_refused = match url.host() {
        Some(host @ (Host::Ipv4(_) | Host::Ipv6(_))) => host_is_internal(&host),
        Some(Host::Domain(_)) => false,
        None => true,
    };
    if literal_refused && !allow_private {
        return Err(AttemptResult::failure(
            Outcome::BlockedDestination,
            "the destination is an internal address",
        ));
    }
    Ok(url)
}

/// What an answer (or its absence) makes of the attempt.
async fn answered(sent: Result<reqwest::Response, impl Into<Sent>>) -> AttemptResult {
    match sent.map_err(Into::into) {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let retry_after = matches!(status, 429 | 503)
                .then(|| retry_after(response.headers()))
                .flatten();
            read_prefix(&mut response).await;
            AttemptResult {
                retry_after,
                ..AttemptResult::from_status(status)
            }
        }
        Err(Sent::Failed(error)) => {
            let (outcome, text) = classify(&error);
            AttemptResult::failure(outcome, text)
        }
        Err(Sent::OutOfTime) => AttemptResult::failure(
            Outcome::Timeout,
            "read timeout: the destination did not answer in time",
        ),
    }
}

/// The longest `Retry-After` taken as said; a longer one is this (the schedule caps it
/// further).
const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(7 * 86_400);

/// A `Retry-After`: delay seconds (whole, or with a fraction as chat platforms send), or an
/// HTTP date measured from this machine's clock. `None` when absent or unreadable: the
/// schedule alone decides.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::from_secs_f64(seconds.min(LONGEST_RETRY_AFTER.as_secs_f64())));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
        .to_std()
        .ok()?;
    Some(wait.min(LONGEST_RETRY_AFTER))
}

/// Reads at most `RESPONSE_PREFIX_BYTES` of the body (so a small answer leaves the
/// connection reusable) and discards it; the rest is never read.
async fn read_prefix(response: &mut reqwest::Response) {
    let mut read = 0;
    while read < RESPONSE_PREFIX_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) | Err(_) => return,
        }
    }
}

fn has_source<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<E>() {
            return true;
        }
        current = error.source();
    }
    false
}

fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = error.source();
    }
    None
}

/// Names the kind of failure; never quotes a response or a driver message.
fn classify(error: &reqwest::Error) -> (Outcome, &'static str) {
    if has_source::<RefusedDestination>(error) {
        return (
            Outcome::BlockedDestination,
            "the destination resolves only to internal addresses",
        );
    }
    if error.is_timeout() {
        let what = if error.is_connect() {
            "connect timeout: the destination did not accept a connection in time"
        } else {
            "read timeout: the destination did not answer in time"
        };
        return (Outcome::Timeout, what);
    }
    if has_source::<UnresolvedName>(error) {
        return (
            Outcome::NetworkError,
            "DNS failure: the destination's name did not resolve",
        );
    }
    let text = match io_kind(error) {
        Some(std::io::ErrorKind::ConnectionRefused) => "connection refused",
        Some(std::io::ErrorKind::ConnectionReset) => "connection reset by the destination",
        Some(std::io::ErrorKind::ConnectionAborted) => "connection aborted",
        Some(std::io::ErrorKind::UnexpectedEof) => "the destination closed the connection early",
        _ if error.is_connect() => "connection failed (network or TLS)",
        _ => "the exchange with the destination failed (connection closed or protocol error)",
    };
    (Outcome::NetworkError, text)
}
