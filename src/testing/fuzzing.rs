//! Entry points for the fuzz targets (`fuzz/`) and for the test that replays their corpus
//! in `cargo test`. Each takes arbitrary bytes, runs one parser of client input, and
//! panics only when an invariant breaks: a parser must never panic, and every refusal of
//! client input must be a client error (4xx), never a 5xx.

use crate::config::IntakeConfig;
use crate::error::ApiError;

fn assert_client_error(error: &ApiError) {
    assert!(
        error.status().is_client_error(),
        "client input answered {}: {error:?}",
        error.status()
    );
}

/// The intake limits the fuzz targets (and the parsers' unit tests) parse with.
pub fn intake_limits() -> IntakeConfig {
    IntakeConfig {
        max_body_bytes: 262_144,
        max_fields: 100,
        max_field_name_length: 128,
        max_field_value_length: 16_384,
        endpoint_cache_max_age: std::time::Duration::from_secs(2),
    }
}

/// What intake does after parsing: the field rules and normalisation.
fn after_parsing(pairs: Result<Vec<(String, String)>, ApiError>) {
    match pairs {
        Ok(pairs) => match crate::intake::fields::check_rules(&pairs, &intake_limits()) {
            Ok(()) => {
                let fields = crate::intake::fields::NormalisedFields::from_pairs(pairs);
                let _ = fields.fingerprint();
            }
            Err(error) => assert_client_error(&error),
        },
        Err(error) => assert_client_error(&error),
    }
}

/// An `application/x-www-form-urlencoded` body.
pub fn form_urlencoded(data: &[u8]) {
    after_parsing(crate::intake::parse::parse_urlencoded(
        data,
        &intake_limits(),
    ));
}

/// A `multipart/form-data` body: the first line is the content type's boundary.
pub fn form_multipart(data: &[u8]) {
    let (boundary, body) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&b"b"[..], data),
    };
    let content_type = format!(
        "multipart/form-data; boundary={}",
        String::from_utf8_lossy(boundary)
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let parsed = runtime.block_on(crate::intake::parse::parse_multipart(
        &content_type,
        bytes::Bytes::copy_from_slice(body),
        &intake_limits(),
    ));
    after_parsing(parsed);
}

/// An `application/json` body.
pub fn form_json(data: &[u8]) {
    after_parsing(crate::intake::parse::parse_json(data, &intake_limits()));
}

/// A webhook URL as an operator would configure it: whatever passes names no internal
/// address literal.
pub fn webhook_url(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = crate::model::destination::validate_webhook_url(text, true);
    if let Ok(url) = crate::model::destination::validate_webhook_url(text, false) {
        let host = url.host().expect("an accepted URL has a host");
        assert!(
            !crate::model::destination::host_is_internal(&host),
            "accepted an internal destination: {text:?}"
        );
    }
}

/// A GraphQL POST body: turned into a request, then admitted (or refused) by the cost
/// checks, and parsed.
pub fn graphql_request(data: &[u8]) {
    let mut request = match crate::graphql::handler::parse_json_body(data) {
        Ok(request) => request,
        Err(refusal) => {
            assert!(refusal.status().is_client_error());
            return;
        }
    };
    let limits = crate::config::Config::from_lookup(|_| None)
        .expect("the defaults are valid")
        .graphql;
    match crate::graphql::cost::admit(&mut request, &limits) {
        Ok(_) => {
            let _ = async_graphql::parser::parse_query(&request.query);
        }
        Err(error) => assert_client_error(&error),
    }
}

/// One fuzz target: arbitrary bytes in, a panic only when an invariant breaks.
pub type Target = fn(&[u8]);

/// Every target by name, for the corpus replay.
pub const TARGETS: &[(&str, Target)] = &[
    ("form_urlencoded", form_urlencoded),
    ("form_multipart", form_multipart),
    ("form_json", form_json),
    ("webhook_url", webhook_url),
    ("graphql_request", graphql_request),
];
