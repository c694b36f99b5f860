//! The one place outbound HTTP is made: the webhook client, and the verifier client that
//! asks the services an operator configured (captcha providers, Akismet) about a
//! submission.
//!
//! - Redirects are never followed; no system proxy is used.
//! - Connect timeout and an overall limit of connect + read timeout, so a request always
//!   ends well inside the lease.
//! - Host names are resolved by our resolver, which drops every internal address and gives
//!   reqwest only the addresses it checked, so the connection goes to a checked address
//!   (no DNS rebinding between check and connect). Address literals are checked before the
//!   request. `FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS=true` lifts both checks.
//! - At most a small prefix of the response body is read, then the connection is dropped.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use url::{Host, Url};

use super::outcome::{AttemptResult, Outcome};
use super::payload::SignatureHeaders;
use crate::config::WebhookConfig;
use crate::model::destination::{host_is_internal, is_internal_address};

/// How much of a response body is read before the connection is dropped.
const RESPONSE_PREFIX_BYTES: usize = 4096;

/// Resolves host names to addresses. Injectable so tests can map a name to an address.
pub trait NameResolver: Send + Sync + 'static {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl NameResolver for SystemResolver {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let host = host.to_string();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|address| address.ip())
                .collect())
        })
    }
}

/// A fixed table of names (for tests); unknown names do not resolve.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Default, Clone)]
pub struct StaticResolver(pub std::collections::HashMap<String, Vec<IpAddr>>);

#[cfg(any(test, feature = "testing"))]
impl NameResolver for StaticResolver {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let found = self.0.get(&host.to_ascii_lowercase()).cloned();
        Box::pin(async move {
            found.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "name not known"))
        })
    }
}

/// The resolver error that marks a destination refused by the address rules.
#[derive(Debug, thiserror::Error)]
#[error("the destination resolves only to refused addresses")]
struct RefusedDestination;

/// The resolver error that marks a name that did not resolve.
#[derive(Debug, thiserror::Error)]
#[error("the destination's name did not resolve")]
struct UnresolvedName;

/// Adapts a `NameResolver` to reqwest, applying the address rules.
struct GuardedResolver {
    inner: Arc<dyn NameResolver>,
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let lookup = self.inner.lookup(name.as_str());
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addresses = lookup.await.map_err(|_| {
                Box::new(UnresolvedName) as Box<dyn std::error::Error + Send + Sync>
            })?;
            if addresses.is_empty() {
                return Err(Box::new(UnresolvedName) as Box<dyn std::error::Error + Send + Sync>);
            }
            let allowed: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|address| allow_private || !is_internal_address(*address))
                .map(|address| SocketAddr::new(address, 0))
                .collect();
            if allowed.is_empty() {
                return Err(
                    Box::new(RefusedDestination) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

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

    /// Sends one signed delivery and classifies what happened. Never panics, never
    /// returns the response body.
    pub async fn send(
        &self,
        destination: &str,
        body: Vec<u8>,
        signatures: &SignatureHeaders,
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
        let request = request.body(body);
        match request.send().await {
            Ok(mut response) => {
                let status = response.status().as_u16();
                read_prefix(&mut response).await;
                AttemptResult::from_status(status)
            }
            Err(error) => classify(&error),
        }
    }
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

/// What a verifier's answer was when it could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifierError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the connection failed")]
    Connection,
    #[error("it answered HTTP {0}")]
    Status(u16),
    #[error("its answer was larger than {VERIFIER_ANSWER_BYTES} bytes")]
    TooLarge,
}

/// The largest verifier answer read (a captcha verdict is a few hundred bytes of JSON).
pub const VERIFIER_ANSWER_BYTES: usize = 16 * 1024;

/// Asks the services an operator configured (their URLs come from the configuration,
/// never from a client, so internal addresses are allowed: a self-hosted verifier, a test
/// on loopback). Same hygiene as the webhook client otherwise: no redirects, no proxy, one
/// deadline for the whole exchange, an answer read up to a bound.
#[derive(Clone)]
pub struct VerifierClient {
    http: reqwest::Client,
    timeout: Duration,
}

impl VerifierClient {
    pub fn new(timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(timeout)
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("Hymical-Forms/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(VerifierClient { http, timeout })
    }

    /// POSTs `form` (`application/x-www-form-urlencoded`) to `url` and answers the body of
    /// a 2xx answer, all within the client's timeout.
    pub async fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
    ) -> Result<Bytes, VerifierError> {
        let exchange = async {
            let mut response = self
                .http
                .post(url)
                .form(form)
                .send()
                .await
                .map_err(|error| self.failure(&error))?;
            let status = response.status();
            if !status.is_success() {
                return Err(VerifierError::Status(status.as_u16()));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|error| self.failure(&error))?
            {
                if body.len() + chunk.len() > VERIFIER_ANSWER_BYTES {
                    return Err(VerifierError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(Bytes::from(body))
        };
        // reqwest's timeout covers the request; this one covers reading the body too.
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(VerifierError::Timeout(self.timeout)))
    }

    fn failure(&self, error: &reqwest::Error) -> VerifierError {
        if error.is_timeout() {
            VerifierError::Timeout(self.timeout)
        } else {
            VerifierError::Connection
        }
    }
}
