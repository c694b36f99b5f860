//! The pages a browser gets from the binary: the operator's console at `/console` and
//! GraphiQL at `/graphql`. Every byte they load is compiled in (`assets/`), served from
//! this origin under a Content-Security-Policy that allows nothing else, so they work
//! offline. Neither page holds anything secret: each asks for a management key itself and
//! talks to the public API (`/graphql`, `/graphql/ws`, `/submissions/export`) like any
//! other client.

pub mod console;
pub mod graphiql;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// One compiled-in file a page loads.
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
}

/// The files of one folder under `assets/` (or of a folder below it: `in "vendor/"`), each
/// with its content type, built into the binary and served by name.
macro_rules! assets {
    ($folder:literal; $($name:literal $(in $below:literal)? => $content_type:expr),+ $(,)?) => {
        &[$(crate::pages::Asset {
            name: $name,
            content_type: $content_type,
            bytes: include_bytes!(concat!("../../assets/", $folder, $($below,)? $name)),
        }),+]
    };
}
pub(crate) use assets;

pub const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
pub const CSS: &str = "text/css; charset=utf-8";
pub const SVG: &str = "image/svg+xml";

fn headers(content_type: &'static str, policy: &'static str) -> [(HeaderName, HeaderValue); 5] {
    [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(policy),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        // The pages' URLs carry nothing secret, but they are nobody else's business.
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    ]
}

/// A page's HTML: revalidated on every load, so a new build's page is seen at once.
pub fn page(html: &'static str, policy: &'static str) -> Response {
    (
        StatusCode::OK,
        headers("text/html; charset=utf-8", policy),
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))],
        html,
    )
        .into_response()
}

/// One of `assets` by name, or the JSON 404.
pub fn asset(assets: &'static [Asset], name: &str, policy: &'static str) -> Response {
    match assets.iter().find(|asset| asset.name == name) {
        Some(asset) => (
            StatusCode::OK,
            headers(asset.content_type, policy),
            // Revalidated too: the page's module graph must come from one build, and the
            // files are small enough that a 304 costs nothing worth saving.
            [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))],
            asset.bytes,
        )
            .into_response(),
        None => ApiError::NotFound.into_response(),
    }
}

/// Whether a request comes from a browser navigating (it asks for HTML first), as opposed
/// to an API client, which gets JSON.
pub fn accepts_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_request_asking_for_html_is_a_browser_navigating() {
        let with = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            accepts_html(&headers)
        };
        assert!(with(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        ));
        assert!(!with("application/json"));
        assert!(!with("*/*"));
        assert!(!accepts_html(&HeaderMap::new()));
    }

    #[test]
    fn an_unknown_asset_is_the_json_404() {
        let response = asset(&[], "nothing.js", "default-src 'self'");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
}
