//! The webhook request body and its signature.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::clock::format_timestamp;
use crate::digest::hmac_sha256_hex;
use crate::model::ids::{EndpointId, SubmissionId};

#[derive(Serialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    submission: SubmissionPayload<'a>,
}

#[derive(Serialize)]
struct SubmissionPayload<'a> {
    id: &'a SubmissionId,
    endpoint_id: &'a EndpointId,
    received_at: String,
    fields: &'a serde_json::Value,
}

/// The compact body, keys in the documented order, non-ASCII unescaped. It is a pure
/// function of the stored submission, so every attempt of a delivery sends the same bytes.
pub fn body(
    submission_id: &SubmissionId,
    endpoint_id: &EndpointId,
    received_at: DateTime<Utc>,
    fields: &serde_json::Value,
) -> Vec<u8> {
    let envelope = Envelope {
        kind: "submission.received",
        submission: SubmissionPayload {
            id: submission_id,
            endpoint_id,
            received_at: format_timestamp(received_at),
            fields,
        },
    };
    // Strings and a JSON value (whose keys are strings) serialise without fail; a body that
    // could not be built must never be sent as an empty one.
    serde_json::to_vec(&envelope).expect("the webhook payload is strings and a JSON value")
}

/// `v1=` and the hex HMAC-SHA256 of the exact body, keyed with the whole secret string.
pub fn signature(secret: &str, body: &[u8]) -> String {
    format!("v1={}", hmac_sha256_hex(secret.as_bytes(), body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_matches_the_documented_shape_byte_for_byte() {
        let fields: serde_json::Value = serde_json::from_str(
            r#"{"email":["user@example.com"],"topics":["billing","api"],"note":["héllo ✓"]}"#,
        )
        .unwrap();
        let received = DateTime::parse_from_rfc3339("2026-08-24T14:34:27.651841Z")
            .unwrap()
            .with_timezone(&Utc);
        let body = body(
            &SubmissionId::parse("sub_48984534f33749c49a88de2d59400dce").unwrap(),
            &EndpointId::parse("contact-form").unwrap(),
            received,
            &fields,
        );
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce","endpoint_id":"contact-form","received_at":"2026-08-24T14:34:27.651841Z","fields":{"email":["user@example.com"],"topics":["billing","api"],"note":["héllo ✓"]}}}"#
        );
    }

    #[test]
    fn signature_is_hmac_of_the_body_keyed_with_the_whole_secret() {
        let secret = format!("whsec_{}", "0".repeat(64));
        let sig = signature(&secret, b"{}");
        assert_eq!(
            sig,
            format!("v1={}", hmac_sha256_hex(secret.as_bytes(), b"{}"))
        );
        assert_ne!(
            sig,
            format!("v1={}", hmac_sha256_hex("0".repeat(64).as_bytes(), b"{}"))
        );
    }
}
