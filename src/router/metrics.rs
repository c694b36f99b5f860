//! `/metrics`, on whichever listener serves it: the figures `telemetry::meters` keeps, with
//! the queue's and the pool's read at each scrape.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::app::AppState;
use crate::auth;
use crate::db;
use crate::error::ApiError;
use crate::telemetry::meters;

pub fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
}

/// The Prometheus text format, version 0.0.4.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

async fn scrape(State(app): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if app.config.metrics.require_key {
        // The figures are the whole installation's: not for a project's key.
        auth::authenticate_headers(&app.db, &headers, app.clock.now())
            .await?
            .require_installation()?;
    }
    let queue = app
        .db
        .run(async |conn| db::deliveries::queue_figures(conn).await)
        .await?;
    meters::record_queue_and_pool(&queue, app.db.usage());
    let mut response = meters::render().into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    Ok(response)
}
