//! Outbound HTTP, below intake and delivery: the resolver every client connects through,
//! which drops every internal address and gives reqwest only the addresses it checked (so
//! the connection goes to a checked address: no DNS rebinding between check and connect;
//! `FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS=true` lifts the check), and the verifier client that
//! asks the services an operator configured (captcha providers, Akismet) about a
//! submission. The webhook client is delivery's (delivery/client.rs), built on this
//! resolver.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::model::destination::is_internal_address;

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
pub(crate) struct RefusedDestination;

/// The resolver error that marks a name that did not resolve.
#[derive(Debug, thiserror::Error)]
#[error("the destination's name did not resolve")]
pub(crate) struct UnresolvedName;

/// Adapts a `NameResolver` to reqwest, applying the address rules.
pub(crate) struct GuardedResolver {
    pub(crate) inner: Arc<dyn NameResolver>,
    pub(crate) allow_private: bool,
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
