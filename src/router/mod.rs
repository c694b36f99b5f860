//! The route table and what wraps every route: a request id, sensitive headers marked as
//! such, one log line per request, and the JSON error envelope for unmatched paths and
//! methods.

use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tower::ServiceBuilder;
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;
use tracing::Span;

use crate::app::AppState;
use crate::db;
use crate::error::ApiError;
use crate::{export, files, graphql, intake, pages};

mod metrics;

/// Every request carries one, in its log line and in the answer, so an operator can find
/// the line a client's report is about.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub fn router(app: AppState) -> Router {
    let schema = graphql::build_schema(app.clone());
    let mut routes = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .merge(intake::routes())
        .merge(export::routes())
        .merge(files::routes::routes())
        .merge(graphql::routes(schema))
        .merge(pages::console::routes());
    if app.config.metrics.bind.is_none() {
        routes = routes.merge(metrics::routes());
    }
    wrap(routes, app)
}

/// The listener of its own that `FORMS_METRICS_BIND` asks for: `/metrics` and `/health`.
pub fn metrics_router(app: AppState) -> Router {
    wrap(
        Router::new()
            .route("/health", get(health))
            .merge(metrics::routes()),
        app,
    )
}

/// What every route of every listener is wrapped in.
fn wrap(routes: Router<AppState>, app: AppState) -> Router {
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(
            ServiceBuilder::new()
                // Their values print as "Sensitive" wherever a header map is logged.
                .layer(SetSensitiveRequestHeadersLayer::new([
                    header::AUTHORIZATION,
                    header::COOKIE,
                    header::PROXY_AUTHORIZATION,
                ]))
                .map_request(keep_only_plain_request_ids)
                .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(request_span)
                        .on_request(())
                        .on_response(log_response)
                        // Server errors are logged once, where they are turned into answers.
                        .on_failure(())
                        .on_body_chunk(())
                        .on_eos(()),
                )
                .layer(PropagateRequestIdLayer::new(REQUEST_ID)),
        )
        .with_state(app)
}

/// A request id a proxy in front set is kept when it is plain (at most 64 letters, digits,
/// `-`, `_`, `.`); anything else is replaced by our own, so no client text of any length or
/// shape reaches a log line through it.
fn keep_only_plain_request_ids(mut request: Request) -> Request {
    let plain = |value: &HeaderValue| {
        let bytes = value.as_bytes();
        (1..=64).contains(&bytes.len())
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if request
        .headers()
        .get(&REQUEST_ID)
        .is_some_and(|v| !plain(v))
    {
        request.headers_mut().remove(&REQUEST_ID);
    }
    request
}

/// Method, route template (never the raw path or query) and request id. Bodies, headers and
/// client addresses are not logged.
fn request_span(request: &Request) -> Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("<unmatched>", MatchedPath::as_str);
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        method = %request.method(),
        route = %route,
        request_id = %request_id,
    )
}

fn log_response(response: &Response, latency: Duration, _span: &Span) {
    tracing::info!(
        target: "hymical_forms::request",
        status = response.status().as_u16(),
        duration_ms = latency.as_secs_f64() * 1000.0,
        "request"
    );
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
