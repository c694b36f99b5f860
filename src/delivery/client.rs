//! The webhook client: the one place a receiver is called.
//!
//! - Redirects are never followed; no system proxy is used.
//! - Connect timeout and an overall limit of connect + read timeout, so a request always
//!   ends well inside the lease.
//! - Host names are resolved through `outbound::GuardedResolver`, which drops every
//!   internal address; address literals are checked before the request.
//!   `FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS=true` lifts both checks.
//! - At most a small prefix of the response body is read, then the connection is dropped.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderValue;
use url::{Host, Url};

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

#[derive(Clone)]
pub struct WebhookClient {
    http: reqwest::Client,
    allow_private: bool,
}

impl WebhookClient {
    pub fn new(
        config: &WebhookConfig,
        resolver: Arc<dyn NameResolver>,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(config.connect_timeout)
            .timeout(config.connect_timeout + config.read_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("Hymical-Forms/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(GuardedResolver {
                inner: resolver,
                allow_private: config.allow_private_targets,
            }))
            .build()?;
        Ok(WebhookClient {
            http,
            allow_private: config.allow_private_targets,
        })
    }

    /// Sends one signed delivery, with the headers its receiver asked for and, when traces
    /// are on, the attempt's W3C `traceparent`, and classifies what happened. Never
    /// panics, never returns the response body.
    pub async fn send(
        &self,
        destination: &str,
        body: Vec<u8>,
        signatures: &SignatureHeaders,
        receiver: &[ReceiverHeader],
        trace_parent: Option<&str>,
    ) -> AttemptResult {
        let url = match Url::parse(destination) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => url,
            _ => {
                return AttemptResult::failure(
                    Outcome::BlockedDestination,
                    "the destination URL is not a valid http(s) URL",
                )
            }
        };
        // Names are checked by the resolver; literals never reach it, so check them here.
        let literal_refused = match url.host() {
            Some(host @ (Host::Ipv4(_) | Host::Ipv6(_))) => host_is_internal(&host),
            Some(Host::Domain(_)) => false,
            None => true,
        };
        if literal_refused && !self.allow_private {
            return AttemptResult::failure(
                Outcome::BlockedDestination,
                "the destination is an internal address",
            );
        }
        let mut request = self
            .http
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
        match request.send().await {
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
            Err(error) => classify(&error),
        }
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
fn classify(error: &reqwest::Error) -> AttemptResult {
    if has_source::<RefusedDestination>(error) {
        return AttemptResult::failure(
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
        return AttemptResult::failure(Outcome::Timeout, what);
    }
    if has_source::<UnresolvedName>(error) {
        return AttemptResult::failure(
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
    AttemptResult::failure(Outcome::NetworkError, text)
}
