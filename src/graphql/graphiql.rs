//! GraphiQL for developers, served by the binary: the page a browser's `GET /graphql`
//! gets, and its assets under `/graphql/assets/`, all compiled in (`assets/graphiql/`), so
//! it works offline and under a Content-Security-Policy that allows only this origin.

use axum::extract::Path;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Only this origin, for everything; fonts and icons come inline (`data:`) in the upstream
/// stylesheet, styles are set by the editor at run time.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; font-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

const PAGE: &str = include_str!("../../assets/graphiql/index.html");

/// (name, content type, bytes) of every asset the page loads.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "graphiql-page.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/graphiql/graphiql-page.js"),
    ),
    (
        "graphiql-page.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/graphiql/graphiql-page.css"),
    ),
    (
        "graphiql.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/graphiql/vendor/graphiql.min.js"),
    ),
    (
        "graphiql.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/graphiql/vendor/graphiql.min.css"),
    ),
    (
        "react.production.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/graphiql/vendor/react.production.min.js"),
    ),
    (
        "react-dom.production.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/graphiql/vendor/react-dom.production.min.js"),
    ),
];

fn headers(content_type: &'static str) -> [(HeaderName, HeaderValue); 4] {
    [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
    ]
}

/// The page; it asks for the key itself (nothing on it is secret).
pub fn page() -> Response {
    (
        StatusCode::OK,
        headers("text/html; charset=utf-8"),
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))],
        PAGE,
    )
        .into_response()
}

/// `GET /graphql/assets/{name}`: an asset, or the JSON 404.
pub async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(asset, _, _)| *asset == name) {
        Some((_, content_type, bytes)) => (
            StatusCode::OK,
            headers(content_type),
            // The same build always serves the same bytes; an hour is a safe reuse.
            [(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            )],
            *bytes,
        )
            .into_response(),
        None => ApiError::NotFound.into_response(),
    }
}
