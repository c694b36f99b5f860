//! The audit trail: who changed what, when and from where, through the management API.
//! An entry is written in the same transaction as its change (`graphql::audit::audited`),
//! so every committed change has its entry and no entry outlives a rolled-back change.
//! What is kept of a change is its arguments with every secret and personal value
//! replaced ([`redacted`]); where from is an HMAC of the client's address under a key of
//! the server's own (`server_secrets`), so the same address gives the same digest in every
//! process and the address itself is never stored.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{broadcast, OnceCell};

use chrono::{DateTime, Utc};

use crate::auth::AuthenticatedKey;
use crate::db::audit::AuditRecord;
use crate::db::{Db, DbError};
use crate::model::ids::ProjectId;

/// What replaces a value the trail must not keep.
pub const REDACTED: &str = "[redacted]";

/// Argument names whose values are never kept: secrets, and the values a person's data
/// lookup or erasure is given (an email address), addresses (recipients, blocked
/// senders), message bodies and templates, and certificates. Compared without letter
/// case; a name containing one of [`SECRET_PARTS`], or ending in `key` (a TLS client key),
/// is redacted too.
const REDACTED_NAMES: &[&str] = &[
    "value",
    "search",
    "key",
    "body",
    "bodytemplate",
    "text",
    "subject",
    "certificate",
    "clientca",
    "recipients",
    "blockedsenders",
];
const SECRET_PARTS: &[&str] = &["secret", "password", "token", "privatekey", "credential"];
/// URLs whose path and query may be the credential (a chat platform's incoming webhook):
/// only their origin is kept.
const URL_NAMES: &[&str] = &["url", "webhookurl"];

/// `arguments` with every value under a redacted name replaced by [`REDACTED`], at any
/// depth.
pub fn redacted(arguments: Value) -> Value {
    match arguments {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(name, value)| {
                    let lower = name.to_ascii_lowercase();
                    let hidden = REDACTED_NAMES.contains(&lower.as_str())
                        || lower.ends_with("key")
                        || SECRET_PARTS.iter().any(|part| lower.contains(part));
                    let value = match (hidden, value) {
                        (_, Value::Null) => Value::Null,
                        (true, _) => Value::String(REDACTED.into()),
                        (false, Value::String(url)) if URL_NAMES.contains(&lower.as_str()) => {
                            Value::String(origin_only(&url))
                        }
                        (false, value) => redacted(value),
                    };
                    (name, value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(redacted).collect()),
        other => other,
    }
}

/// `https://hooks.example.com/[redacted]`: the scheme and host of a URL, what it points
/// at; its path and query replaced.
fn origin_only(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) if parsed.has_host() => {
            format!("{}/{REDACTED}", parsed.origin().ascii_serialization())
        }
        _ => REDACTED.to_string(),
    }
}

/// The process's part of the trail: the address key, and the entries committed in any
/// process (a notification each) for the subscriptions.
pub struct AuditTrail {
    db: Db,
    address_key: OnceCell<Arc<[u8]>>,
    committed: broadcast::Sender<i64>,
}

/// A read to record: who, from where, what and when.
pub struct Read<'a> {
    pub key: &'a AuthenticatedKey,
    /// The client's address (only its HMAC is stored); empty when unknown.
    pub address: &'a str,
    pub operation: &'a str,
    pub targets: Vec<String>,
    pub arguments: Value,
    pub project: Option<ProjectId>,
    pub at: DateTime<Utc>,
}

/// Entries a slow subscriber may fall behind by before it is told it missed some.
const SUBSCRIBER_BACKLOG: usize = 1024;

impl AuditTrail {
    pub fn new(db: Db) -> AuditTrail {
        AuditTrail {
            db,
            address_key: OnceCell::new(),
            committed: broadcast::channel(SUBSCRIBER_BACKLOG).0,
        }
    }

    /// The HMAC of a client's address, as lowercase hex.
    pub async fn address_digest(&self, address: &str) -> Result<String, DbError> {
        let key = self
            .address_key
            .get_or_try_init(|| crate::db::server_secrets::load(&self.db, "audit_addresses"))
            .await?;
        Ok(crate::digest::hmac_sha256_hex(key, address.as_bytes()))
    }

    /// The entry for `read`: its arguments redacted, the client's address as its HMAC.
    /// What every entry is made by (a mutation's in `graphql::audit::audited`).
    pub async fn record(&self, read: Read<'_>) -> Result<AuditRecord, DbError> {
        let address_digest = match read.address.is_empty() {
            true => None,
            false => Some(self.address_digest(read.address).await?),
        };
        Ok(AuditRecord {
            at: read.at,
            key_id: read.key.id.to_string(),
            key_name: read.key.name.clone(),
            project_id: read.project,
            operation: read.operation.to_string(),
            targets: read.targets.into_iter().map(Some).collect(),
            changes: redacted(read.arguments),
            address_digest,
        })
    }

    /// Records a read that takes data out (an export, a person's data) in a transaction
    /// of its own before the data goes out: a read changes nothing to share one with.
    pub async fn record_read(&self, read: Read<'_>) -> Result<(), DbError> {
        let row = self.record(read).await?;
        self.db
            .run(async |conn| crate::db::audit::insert(conn, &row).await)
            .await?;
        Ok(())
    }

    /// An entry committed (its notification arrived).
    pub fn committed(&self, id: i64) {
        // No subscriber: nobody to tell.
        let _ = self.committed.send(id);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.committed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_and_personal_values_are_redacted_at_any_depth() {
        let input = json!({
            "input": {
                "id": "dst_1",
                "url": "https://example.com/hook",
                "headers": [{ "name": "X-Token", "value": "abc", "secret": true }],
                "authentication": { "basic": { "username": "u", "password": "p" },
                                    "oauth2": { "clientSecret": "s", "tokenUrl": "t" } },
                "tlsClientKey": "-----BEGIN PRIVATE KEY-----",
                "extraCa": null,
                "privateKey": "k",
                "bodyTemplate": "{{x}}",
                "recipients": ["owner@example.com"],
                "blockedSenders": ["spammer@example.com"],
                "emailTemplate": { "subject": "Hi {{x}}", "text": "Dear x" },
                "clientCa": "-----BEGIN CERTIFICATE-----",
                "webhookUrl": "https://hooks.slack.com/services/T0/B0/XYZ",
            },
            "value": "ann@example.com",
        });
        let out = redacted(input);
        assert_eq!(out["input"]["id"], "dst_1");
        assert_eq!(out["input"]["url"], "https://example.com/[redacted]");
        assert_eq!(out["input"]["headers"][0]["name"], "X-Token");
        assert_eq!(out["input"]["headers"][0]["value"], REDACTED);
        assert_eq!(out["input"]["headers"][0]["secret"], REDACTED);
        assert_eq!(out["input"]["authentication"]["basic"]["username"], "u");
        assert_eq!(
            out["input"]["authentication"]["basic"]["password"],
            REDACTED
        );
        assert_eq!(
            out["input"]["authentication"]["oauth2"]["clientSecret"],
            REDACTED
        );
        assert_eq!(
            out["input"]["authentication"]["oauth2"]["tokenUrl"],
            REDACTED
        );
        assert_eq!(out["input"]["tlsClientKey"], REDACTED);
        assert_eq!(out["input"]["extraCa"], Value::Null);
        assert_eq!(out["input"]["privateKey"], REDACTED);
        assert_eq!(out["value"], REDACTED);
        assert_eq!(
            out["input"]["webhookUrl"],
            "https://hooks.slack.com/[redacted]"
        );
        for hidden in ["bodyTemplate", "recipients", "blockedSenders", "clientCa"] {
            assert_eq!(out["input"][hidden], REDACTED, "{hidden}");
        }
        assert_eq!(out["input"]["emailTemplate"]["subject"], REDACTED);
        assert_eq!(out["input"]["emailTemplate"]["text"], REDACTED);
        let text = out.to_string();
        for secret in [
            "abc",
            "\"p\"",
            "\"s\"",
            "\"k\"",
            "ann@example.com",
            "PRIVATE",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
}
