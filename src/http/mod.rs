//! HTTP plumbing every route shares: the server itself (`server`), bounded body reads, and
//! the shutdown signal. The route table is `crate::router`; the handlers live with their
//! concern (intake, export, GraphQL).

pub mod server;

use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;

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
        }
    }
}

/// Collects a request body, refusing it as soon as it passes `limit_bytes` (so at most that
/// much is ever buffered, declared length or not) or when it has not all arrived within
/// `deadline`.
pub async fn read_body(
    body: Body,
    limit_bytes: usize,
    deadline: Duration,
) -> Result<Bytes, BodyError> {
    let collect = http_body_util::Limited::new(body, limit_bytes).collect();
    match tokio::time::timeout(deadline, collect).await {
        Err(_) => Err(BodyError::TimedOut { limit: deadline }),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error))
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(BodyError::TooLarge { limit_bytes })
        }
        Ok(Err(_)) => Err(BodyError::Unreadable),
    }
}
