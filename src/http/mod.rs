//! HTTP plumbing every route shares: the server itself (`server`), the client's address
//! through trusted proxies (`client_address`), bounded body reads, and the shutdown signal. The route table is `crate::router`; the handlers live with their
//! concern (intake, export, GraphQL).

mod client_address;
pub mod server;

pub use client_address::client_address;

use std::time::Duration;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(stream) => stream,
        Err(error) => {
            tracing::error!(%error, "cannot listen for SIGTERM");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
    }
}

/// Why a request body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// More than the limit arrived (or was declared).
    TooLarge { limit_bytes: usize },
    /// The whole body did not arrive within the deadline (a trickling client).
    TimedOut { limit: Duration },
    /// The connection failed while reading.
    Unreadable,
    /// Holding it would pass the bound on bodies buffered at once, all requests together.
    ServerBusy,
}

impl From<BodyError> for ApiError {
    fn from(error: BodyError) -> Self {
        match error {
            BodyError::TooLarge { limit_bytes } => ApiError::RequestBodyTooLarge { limit_bytes },
            BodyError::TimedOut { limit } => ApiError::RequestBodyTimeout {
                limit_seconds: limit.as_secs_f64().ceil() as u64,
            },
            BodyError::Unreadable => ApiError::MalformedFormBody {
                reason: "the request body could not be read".into(),
            },
            BodyError::ServerBusy => ApiError::ServerBusy {
                retry_after_seconds: BUSY_RETRY_AFTER_SECONDS,
            },
        }
    }
}

/// What a client refused for [`BodyError::ServerBusy`] is told to wait: bodies are read
/// within seconds, so room comes back quickly.
pub const BUSY_RETRY_AFTER_SECONDS: u64 = 1;

/// The bytes of request bodies the process holds at once, all requests together
/// (`FORMS_HTTP_MAX_BUFFERED_BODY_BYTES`): every connection may stream a body of the
/// largest size at once, so without a bound of their own the bodies in memory would grow
/// with the connections.
#[derive(Clone)]
pub struct BodyBudget(Arc<Semaphore>);

impl BodyBudget {
    pub fn new(bytes: usize) -> BodyBudget {
        BodyBudget(Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))))
    }

    /// Holds `bytes` of the budget until the permit is dropped: a streamed body's buffers
    /// (an upload keeps a bounded window of its body in memory, never all of it). Refused
    /// at once when the budget has no room, as a buffered body's next piece would be.
    pub fn hold(&self, bytes: usize) -> Result<OwnedSemaphorePermit, BodyError> {
        let bytes = u32::try_from(bytes).map_err(|_| BodyError::ServerBusy)?;
        self.0.clone().try_acquire_many_owned(bytes).map_err(|_| {
            crate::telemetry::meters::request_refused_for_buffered_bodies();
            BodyError::ServerBusy
        })
    }

    /// Bytes still free (tests).
    #[cfg(any(test, feature = "testing"))]
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// A body read whole, counted against the budget until it is dropped.
pub struct BufferedBody {
    bytes: Bytes,
    _held: Option<OwnedSemaphorePermit>,
}

impl BufferedBody {
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

/// Collects a request body, refusing it as soon as it passes `limit_bytes` (so at most that
/// much is ever buffered, declared length or not), when it has not all arrived within
/// `deadline`, or when holding the next piece would pass the `budget` of all bodies held
/// at once. Each piece is counted as it arrives: a body that is refused gives its bytes
/// back at once, and a slow one holds only what it sent.
pub async fn read_body(
    body: Body,
    limit_bytes: usize,
    deadline: Duration,
    budget: &BodyBudget,
) -> Result<BufferedBody, BodyError> {
    use http_body::Body as _;
    if body.size_hint().lower() > limit_bytes as u64 {
        return Err(BodyError::TooLarge { limit_bytes });
    }
    let read = async {
        let mut body = body;
        let mut collected = bytes::BytesMut::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|_| BodyError::Unreadable)?.into_data() else {
                continue; // trailers carry nothing a handler reads
            };
            if collected.len() + data.len() > limit_bytes {
                return Err(BodyError::TooLarge { limit_bytes });
            }
            let Ok(size) = u32::try_from(data.len()) else {
                return Err(BodyError::TooLarge { limit_bytes });
            };
            let permit = budget.0.clone().try_acquire_many_owned(size).map_err(|_| {
                crate::telemetry::meters::request_refused_for_buffered_bodies();
                BodyError::ServerBusy
            })?;
            match &mut held {
                Some(held) => held.merge(permit),
                None => held = Some(permit),
            }
            collected.extend_from_slice(&data);
        }
        Ok(BufferedBody {
            bytes: collected.freeze(),
            _held: held,
        })
    };
    tokio::time::timeout(deadline, read)
        .await
        .map_err(|_| BodyError::TimedOut { limit: deadline })?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(chunks: &[&'static [u8]]) -> Body {
        let stream = futures_util::stream::iter(
            chunks
                .iter()
                .map(|chunk| Ok::<_, std::io::Error>(Bytes::from_static(chunk)))
                .collect::<Vec<_>>(),
        );
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn bodies_held_at_once_stay_within_the_budget() {
        let budget = BodyBudget::new(10);
        let deadline = Duration::from_secs(5);
        let first = read_body(body(&[b"12345", b"678"]), 100, deadline, &budget)
            .await
            .expect("fits");
        assert_eq!(first.bytes().as_ref(), b"12345678");
        assert_eq!(budget.available(), 2);
        assert_eq!(
            read_body(body(&[b"abc"]), 100, deadline, &budget)
                .await
                .err(),
            Some(BodyError::ServerBusy)
        );
        assert_eq!(budget.available(), 2, "a refused body gives its bytes back");
        drop(first);
        assert_eq!(budget.available(), 10);
        assert!(read_body(body(&[b"abc"]), 100, deadline, &budget)
            .await
            .is_ok());
        assert_eq!(
            read_body(body(&[b"abcdef"]), 5, deadline, &budget)
                .await
                .err(),
            Some(BodyError::TooLarge { limit_bytes: 5 })
        );
        assert_eq!(budget.available(), 10);
    }
}
