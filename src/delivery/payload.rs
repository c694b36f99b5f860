//! The webhook request body and its signatures: `Hymical-Signature` (the body, keyed with
//! the delivery's snapshot secret) and Standard Webhooks (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`: id, time and body, keyed with each of the
//! endpoint's live secrets).
//!
//! [`sign`] is the one place that decides which of these headers a request carries, by
//! the kind of request ([`Signing`]): a submission's webhook carries both, an operational
//! webhook (an operator alert) the Standard Webhooks headers alone. The client sends
//! what [`SignatureHeaders::headers`] lists and nothing else.

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::clock::format_timestamp;
use crate::digest::{hmac_sha256, hmac_sha256_hex};
use crate::files::FileMetadata;
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
    /// Left out for a submission without files, so those bodies are what they always
    /// were.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    files: &'a [FileMetadata],
}

/// The compact body, keys in the documented order, non-ASCII unescaped. It is a pure
/// function of the stored submission (its files' links expire a fixed time after its
/// receipt), so every attempt of a delivery sends the same bytes.
pub fn body(
    submission_id: &SubmissionId,
    endpoint_id: &EndpointId,
    received_at: DateTime<Utc>,
    fields: &serde_json::Value,
    files: &[FileMetadata],
) -> Vec<u8> {
    let envelope = Envelope {
        kind: "submission.received",
        submission: SubmissionPayload {
            id: submission_id,
            endpoint_id,
            received_at: format_timestamp(received_at),
            fields,
            files,
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

/// What a request is, which decides how it is signed.
#[derive(Debug, Clone, Copy)]
pub enum Signing<'a> {
    /// A submission's webhook delivery: `Hymical-Signature` with `snapshot`, the secret
    /// the delivery was accepted under (the rule receivers of that header know), and
    /// `webhook-signature` with the endpoint's `live` secrets (its current secret and a
    /// rotated-out one still in its overlap window), so a receiver holding either
    /// verifies and a secret whose overlap ended signs nothing more, or, when the
    /// endpoint has none for this delivery's URL, with `snapshot`.
    /// With `ed25519`, the destination's Ed25519 key also signs `webhook-signature`
    /// (`v1a`, beside the `v1` HMAC ones).
    Submission {
        snapshot: &'a str,
        live: &'a [&'a str],
        ed25519: Option<&'a ed25519_dalek::SigningKey>,
    },
    /// An operational webhook (an operator alert): Standard Webhooks alone, with the
    /// operator's `FORMS_ALERT_WEBHOOK_SECRET`. No `Hymical-Signature`: it signs no
    /// timestamp, so a captured alert could be replayed to any receiver trusting it.
    Operational { secret: &'a str },
}

/// The headers that sign one request.
#[derive(Debug, Clone)]
pub struct SignatureHeaders {
    /// `Hymical-Signature`: a submission's webhook only.
    pub hymical: Option<String>,
    /// `webhook-id`: the delivery's id (an alert's: its event's), the same on every
    /// attempt and replay.
    pub webhook_id: String,
    /// `webhook-timestamp`: when the attempt started, in whole seconds.
    pub webhook_timestamp: i64,
    /// `webhook-signature`; empty if no secret could sign (then the header is left out).
    pub webhook_signature: String,
}

impl SignatureHeaders {
    /// Every signing header the request carries, name and value, in this order.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(4);
        if let Some(hymical) = &self.hymical {
            headers.push(("Hymical-Signature", hymical.clone()));
        }
        headers.push(("webhook-id", self.webhook_id.clone()));
        headers.push(("webhook-timestamp", self.webhook_timestamp.to_string()));
        if !self.webhook_signature.is_empty() {
            headers.push(("webhook-signature", self.webhook_signature.clone()));
        }
        headers
    }
}

/// Every header that signs one attempt of a request, as `signing` says for its kind.
/// Answers how many secrets could not sign `webhook-signature` as well (none, for
/// secrets in the stored format).
pub fn sign(
    message_id: &str,
    signing: Signing<'_>,
    attempted_at: DateTime<Utc>,
    body: &[u8],
) -> (SignatureHeaders, usize) {
    let webhook_timestamp = attempted_at.timestamp();
    let (hymical, standard): (Option<String>, &[&str]) = match &signing {
        Signing::Submission { snapshot, live, .. } => (
            Some(signature(snapshot, body)),
            if live.is_empty() {
                std::slice::from_ref(snapshot)
            } else {
                live
            },
        ),
        Signing::Operational { secret } => (None, std::slice::from_ref(secret)),
    };
    let (mut webhook_signature, refused) = standard_signatures(
        message_id,
        webhook_timestamp,
        body,
        standard.iter().copied(),
    );
    if let Signing::Submission {
        ed25519: Some(key), ..
    } = signing
    {
        let asymmetric = ed25519_signature(key, message_id, webhook_timestamp, body);
        if !webhook_signature.is_empty() {
            webhook_signature.push(' ');
        }
        webhook_signature.push_str(&asymmetric);
    }
    (
        SignatureHeaders {
            hymical,
            webhook_id: message_id.to_string(),
            webhook_timestamp,
            webhook_signature,
        },
        refused,
    )
}

/// The prefix of every signing secret.
const SECRET_PREFIX: &str = "whsec_";

/// The key a Standard Webhooks verifier takes from a `whsec_` secret: the base64 decoding
/// of what follows the prefix. Our secrets' 64 hex digits are base64 characters, so every
/// secret this service made (or adopted: the same format, held by a CHECK) decodes, to 48
/// bytes; `None` for a string that does not.
fn standard_key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix(SECRET_PREFIX)?;
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .filter(|key| !key.is_empty())
}

/// The value of `webhook-signature`: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`
/// for each of `secrets` (duplicates once), space-separated, as the Standard Webhooks
/// specification lists several signatures. A secret that is not a `whsec_` base64 key is
/// left out and named in the error list, so the caller can say so.
pub fn standard_signatures<'a>(
    message_id: &str,
    timestamp: i64,
    body: &[u8],
    secrets: impl IntoIterator<Item = &'a str>,
) -> (String, usize) {
    let timestamp = timestamp.to_string();
    let mut seen: Vec<&str> = Vec::new();
    let mut signatures: Vec<String> = Vec::new();
    let mut refused = 0;
    for secret in secrets {
        if seen.contains(&secret) {
            continue;
        }
        seen.push(secret);
        let Some(key) = standard_key(secret) else {
            refused += 1;
            continue;
        };
        let mac = hmac_sha256(
            &key,
            &[
                message_id.as_bytes(),
                b".",
                timestamp.as_bytes(),
                b".",
                body,
            ],
        );
        signatures.push(format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac)
        ));
    }
    (signatures.join(" "), refused)
}

/// `v1a,<base64 Ed25519 signature of "{id}.{timestamp}.{body}">`: the Standard Webhooks
/// asymmetric signature, which a receiver verifies with the public key alone.
pub fn ed25519_signature(
    key: &ed25519_dalek::SigningKey,
    message_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    use ed25519_dalek::Signer;
    let mut signed = Vec::with_capacity(message_id.len() + body.len() + 24);
    signed.extend_from_slice(message_id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(timestamp.to_string().as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    format!(
        "v1a,{}",
        base64::engine::general_purpose::STANDARD.encode(key.sign(&signed).to_bytes())
    )
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
            &[],
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

    /// The example of the Standard Webhooks specification (its secret, id, time, body and
    /// signature), so the key derivation and the signed string are the specification's.
    #[test]
    fn standard_signature_matches_the_specification_example() {
        let (header, refused) = standard_signatures(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        );
        assert_eq!(refused, 0);
        assert_eq!(header, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn live_secrets_sign_webhook_signature_and_the_snapshot_only_without_them() {
        let (snapshot, current, previous) = (
            format!("whsec_{}", "01".repeat(32)),
            format!("whsec_{}", "23".repeat(32)),
            format!("whsec_{}", "45".repeat(32)),
        );
        let at = Utc::now();
        let live = [current.as_str(), previous.as_str()];
        let submission = Signing::Submission {
            snapshot: &snapshot,
            live: &live,
            ed25519: None,
        };
        let (headers, _) = sign("whd_1", submission, at, b"{}");
        let expected = standard_signatures(
            "whd_1",
            at.timestamp(),
            b"{}",
            [current.as_str(), previous.as_str()],
        )
        .0;
        assert_eq!(headers.webhook_signature, expected);
        assert_eq!(headers.hymical, Some(signature(&snapshot, b"{}")));
        let alone = Signing::Submission {
            snapshot: &snapshot,
            live: &[],
            ed25519: None,
        };
        let (alone, _) = sign("whd_1", alone, at, b"{}");
        assert_eq!(
            alone.webhook_signature,
            standard_signatures("whd_1", at.timestamp(), b"{}", [snapshot.as_str()]).0
        );
    }

    /// With a key, `v1a` follows the HMAC signatures and verifies with the public key
    /// over the Standard Webhooks string.
    #[test]
    fn an_ed25519_key_adds_a_v1a_signature_after_the_hmac_ones() {
        use ed25519_dalek::Verifier;
        let secret = format!("whsec_{}", "89".repeat(32));
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let at = Utc::now();
        let signing = Signing::Submission {
            snapshot: &secret,
            live: &[],
            ed25519: Some(&key),
        };
        let (headers, _) = sign("whd_2", signing, at, b"{\"a\":1}");
        let (hmac, v1a) = headers
            .webhook_signature
            .split_once(' ')
            .expect("two signatures");
        assert!(hmac.starts_with("v1,"), "{hmac}");
        let signature = base64::engine::general_purpose::STANDARD
            .decode(v1a.strip_prefix("v1a,").expect("v1a"))
            .expect("base64");
        let signature = ed25519_dalek::Signature::from_slice(&signature).expect("64 bytes");
        let signed = format!("whd_2.{}.{{\"a\":1}}", at.timestamp());
        assert!(key
            .verifying_key()
            .verify(signed.as_bytes(), &signature)
            .is_ok());
    }

    /// A submission's webhook carries both signatures; an operational webhook the
    /// Standard Webhooks headers alone, never `Hymical-Signature`.
    #[test]
    fn the_kind_of_request_decides_its_headers() {
        let secret = format!("whsec_{}", "67".repeat(32));
        let at = Utc::now();
        let names = |headers: &SignatureHeaders| -> Vec<&'static str> {
            headers
                .headers()
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        };
        let (submission, _) = sign(
            "whd_1",
            Signing::Submission {
                snapshot: &secret,
                live: &[],
                ed25519: None,
            },
            at,
            b"{}",
        );
        assert_eq!(
            names(&submission),
            [
                "Hymical-Signature",
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature"
            ]
        );
        let (alert, refused) = sign(
            "alert_7",
            Signing::Operational { secret: &secret },
            at,
            b"{}",
        );
        assert_eq!(refused, 0);
        assert_eq!(alert.hymical, None);
        assert_eq!(
            names(&alert),
            ["webhook-id", "webhook-timestamp", "webhook-signature"]
        );
        assert_eq!(
            alert.webhook_signature,
            standard_signatures("alert_7", at.timestamp(), b"{}", [secret.as_str()]).0
        );
    }

    #[test]
    fn every_live_secret_signs_once_and_ours_decode() {
        let a = format!("whsec_{}", "ab".repeat(32));
        let b = format!("whsec_{}", "cd".repeat(32));
        assert_eq!(standard_key(&a).map(|key| key.len()), Some(48));
        let (header, refused) =
            standard_signatures("whd_1", 1, b"{}", [a.as_str(), b.as_str(), a.as_str()]);
        assert_eq!(refused, 0);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|part| part.starts_with("v1,")));
        assert_ne!(parts[0], parts[1]);
        let (none, refused) = standard_signatures("whd_1", 1, b"{}", ["not-a-secret"]);
        assert_eq!((none.as_str(), refused), ("", 1));
    }
}
