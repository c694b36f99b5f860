//! What a browser needs from public intake: the redirect for HTML form posts, CORS and
//! preflight answers.

use axum::http::{header, HeaderMap, HeaderValue};

use crate::db::models::EndpointRow;

/// Whether `Accept` ranks `text/html` above `application/json` (a browser's form post).
pub fn prefers_html(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    quality(accept, "text", "html") > quality(accept, "application", "json")
}

/// The q-value `accept` gives `kind/subtype`, from its most specific matching range.
fn quality(accept: &str, kind: &str, subtype: &str) -> f32 {
    let mut best: Option<(u8, f32)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let Some((range_kind, range_subtype)) = media.split_once('/') else {
            continue;
        };
        let specificity = match (range_kind, range_subtype) {
            (k, s) if k == kind && s == subtype => 2,
            (k, "*") if k == kind => 1,
            ("*", "*") => 0,
            _ => continue,
        };
        let q = parts
            .filter_map(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .or_else(|| p.trim().strip_prefix("Q="))
            })
            .find_map(|v| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

fn same_origin(listed: &str, origin: &str) -> bool {
    listed
        .trim_end_matches('/')
        .eq_ignore_ascii_case(origin.trim_end_matches('/'))
}

/// Whether a request with this `Origin` may post: yes without a list or without the
/// header (non-browser clients), else only a listed origin.
pub fn origin_allowed(endpoint: &EndpointRow, origin: Option<&str>) -> bool {
    let mut listed = endpoint.allowed_origins().peekable();
    match origin {
        _ if listed.peek().is_none() => true,
        None => true,
        Some(origin) => listed.any(|allowed| same_origin(allowed, origin)),
    }
}

/// Adds `Access-Control-Allow-Origin`: the origin itself (with `Vary: Origin`) when the
/// endpoint lists it, `*` when the endpoint has no list or is not known, nothing when the
/// origin is not listed.
pub fn add_cors_headers(
    headers: &mut HeaderMap,
    endpoint: Option<&EndpointRow>,
    origin: Option<&str>,
) {
    let has_list = endpoint.is_some_and(|e| e.allowed_origins().next().is_some());
    if !has_list {
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
    } else {
        headers.append(header::VARY, HeaderValue::from_static("origin"));
        if let (Some(endpoint), Some(origin)) = (endpoint, origin) {
            if origin_allowed(endpoint, Some(origin)) {
                if let Ok(value) = HeaderValue::from_str(origin) {
                    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
                }
            }
        }
    }
    // Lets a script read when to retry after a 429.
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("retry-after"),
    );
}

/// The extra headers of a successful preflight answer.
pub fn add_preflight_headers(headers: &mut HeaderMap) {
    for (name, value) in [
        (header::ACCESS_CONTROL_ALLOW_METHODS, "POST"),
        (
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            "Content-Type, Idempotency-Key",
        ),
        (header::ACCESS_CONTROL_MAX_AGE, "600"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_preference() {
        let firefox = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(prefers_html(Some(firefox)));
        assert!(!prefers_html(None));
        assert!(!prefers_html(Some("*/*")));
        assert!(!prefers_html(Some("application/json")));
        assert!(!prefers_html(Some("application/json, text/html")));
        assert!(prefers_html(Some("application/json;q=0.5, text/html")));
        assert!(prefers_html(Some("text/*, application/json;q=0.9")));
        assert!(!prefers_html(Some("text/html;q=0.1, */*")));
    }
}
