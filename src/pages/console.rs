//! The operator's console (docs/console.md): one page at `/console`, its modules and
//! stylesheet under `/console/assets/` (`assets/console/`, hand-written, no build step),
//! and `/` sending a browser there.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::{assets, Asset, CSS, JAVASCRIPT, SVG};
use crate::app::AppState;
use crate::error::ApiError;

/// Only this origin, and no inline script or style at all: the console sets no `style`
/// attribute and its chart is SVG drawn with attributes and classes.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

const PAGE: &str = include_str!("../../assets/console/index.html");

const ASSETS: &[Asset] = assets!["console/";
    "console.css" => CSS,
    "favicon.svg" => SVG,
    "main.js" => JAVASCRIPT,
    "api.js" => JAVASCRIPT,
    "live.js" => JAVASCRIPT,
    "dom.js" => JAVASCRIPT,
    "words.js" => JAVASCRIPT,
    "overview.js" => JAVASCRIPT,
    "endpoints.js" => JAVASCRIPT,
    "destinations.js" => JAVASCRIPT,
    "receivers.js" => JAVASCRIPT,
    "deliveries.js" => JAVASCRIPT,
    "submissions.js" => JAVASCRIPT,
    "people.js" => JAVASCRIPT,
    "projects.js" => JAVASCRIPT,
    "keys.js" => JAVASCRIPT,
    "audit.js" => JAVASCRIPT,
];

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(root))
        .route("/console", get(page))
        .route("/console/assets/{name}", get(asset))
}

async fn page() -> Response {
    super::page(PAGE, CONTENT_SECURITY_POLICY)
}

async fn asset(Path(name): Path<String>) -> Response {
    super::asset(ASSETS, &name, CONTENT_SECURITY_POLICY)
}

/// A browser opening the server's address lands on the console; an API client asking for
/// `/` gets the JSON 404 every unknown path gets.
async fn root(headers: HeaderMap) -> Response {
    if super::accepts_html(&headers) {
        (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, HeaderValue::from_static("/console"))],
        )
            .into_response()
    } else {
        ApiError::NotFound.into_response()
    }
}
