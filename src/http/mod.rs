//! The HTTP surface: routes, the JSON error envelope for unmatched paths and methods, one
//! log line per request, bounded body reads, the server itself (`server`) and the
//! shutdown signal.

pub mod server;

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http_body_util::BodyExt;
use serde_json::json;

use crate::app::AppState;
use crate::db;
use crate::error::ApiError;
use crate::{export, graphql, intake};

pub fn router(app: AppState) -> Router {
    let schema = graphql::build_schema(app.clone());
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .merge(intake::routes())
        .merge(export::routes())
        .merge(graphql::routes(schema))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(log_request))
        .with_state(app)
}

/// Liveness: answers without touching the database.
async fn health() -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "service": "hymical-forms",
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// Readiness: 200 while the database answers, 503 `storage_unavailable` otherwise.
async fn ready(State(app): State<AppState>) -> Response {
    match db::ping(&app.db).await {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(error) => ApiError::from(error).into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound
}

/// A wrong method gets the JSON envelope every other error has; axum adds the `Allow`
/// header, listing the route's methods, to whatever this returns.
async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed {
        allow: String::new(),
    }
}

/// One line per request: method, route template (never the raw path or query), status and
/// duration. Bodies, headers and client addresses are not logged.
async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "<unmatched>".to_owned());
    let response = next.run(request).await;
    tracing::info!(
        target: "hymical_forms::request",
        method = %method,
        route = %route,
        status = response.status().as_u16(),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}

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
