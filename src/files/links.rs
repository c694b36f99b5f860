//! Signed download links: `{FORMS_PUBLIC_URL}/files/{id}?expires={unix}&signature={hex}`,
//! the signature HMAC-SHA256 of `{id}.{expires}` under the server's `file_links` key
//! (made once, kept in `server_secrets`, so that every process signs and checks alike).
//! A link handed to an API key (`Submission.files`) also names that key,
//! `…&key={key id}&signature=…`, signed as `{id}.{expires}.{key id}`: it works only while
//! the key is not revoked (the download checks), and the key cannot be taken off it
//! without breaking the signature.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use subtle::ConstantTimeEq;

use crate::db::{Db, DbError};
use crate::model::ids::{FileId, KeyId};

const KEY_NAME: &str = "file_links";

/// Reads the link key, storing a new random one if none exists yet.
pub async fn load_key(db: &Db) -> Result<Arc<[u8]>, DbError> {
    crate::db::server_secrets::load(db, KEY_NAME).await
}

/// When a link made for something at `from` stops working, in Unix seconds.
pub fn expiry(from: DateTime<Utc>, ttl: Duration) -> i64 {
    from.timestamp()
        .saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX))
}

/// `expires` is a whole number (it has no `.`), so a signed text with a holder can
/// never be read as one without.
fn signature(key: &[u8], file: &str, expires: i64, holder: Option<&str>) -> String {
    let signed = match holder {
        None => format!("{file}.{expires}"),
        Some(holder) => format!("{file}.{expires}.{holder}"),
    };
    crate::digest::hmac_sha256_hex(key, signed.as_bytes())
}

/// The link to `file` valid until `expires`; with `holder`, only while that API key is
/// not revoked.
pub fn url(
    public_url: &str,
    key: &[u8],
    file: &FileId,
    expires: i64,
    holder: Option<&KeyId>,
) -> String {
    let signature = signature(key, file.as_str(), expires, holder.map(KeyId::as_str));
    match holder {
        None => format!("{public_url}/files/{file}?expires={expires}&signature={signature}"),
        Some(holder) => format!(
            "{public_url}/files/{file}?expires={expires}&key={holder}&signature={signature}"
        ),
    }
}

/// Why a link does not open its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its signature does not match (tampered, or made with another key).
    Invalid,
    /// Genuine, but its time is up.
    Expired,
}

/// A link's query parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkQuery<'a> {
    pub expires: Option<&'a str>,
    /// The API key the link was handed to, if any.
    pub holder: Option<&'a str>,
    pub signature: Option<&'a str>,
}

/// Checks a link's parameters: the signature first, so a changed `expires` (or `key`) is
/// a tampered link, not an expired one. Answers the API key the link was handed to, whose
/// revocation the caller must still check.
pub fn verify(
    key: &[u8],
    file: &str,
    query: LinkQuery<'_>,
    now: DateTime<Utc>,
) -> Result<Option<KeyId>, Refused> {
    let (Some(expires), Some(given)) = (query.expires, query.signature) else {
        return Err(Refused::Invalid);
    };
    let Ok(expires_at) = expires.parse::<i64>() else {
        return Err(Refused::Invalid);
    };
    let expected = signature(key, file, expires_at, query.holder);
    if !bool::from(expected.as_bytes().ct_eq(given.as_bytes())) {
        return Err(Refused::Invalid);
    }
    // Signed by this server, so a well-formed id; anything else is no link of ours.
    let holder = match query.holder {
        None => None,
        Some(holder) => Some(KeyId::parse(holder).ok_or(Refused::Invalid)?),
    };
    if now.timestamp() >= expires_at {
        return Err(Refused::Expired);
    }
    Ok(holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query of a link as the route reads it.
    fn query(link: &str) -> std::collections::HashMap<String, String> {
        link.split_once('?')
            .unwrap()
            .1
            .split('&')
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap();
                (name.to_string(), value.to_string())
            })
            .collect()
    }

    fn parts(query: &std::collections::HashMap<String, String>) -> LinkQuery<'_> {
        LinkQuery {
            expires: query.get("expires").map(String::as_str),
            holder: query.get("key").map(String::as_str),
            signature: query.get("signature").map(String::as_str),
        }
    }

    #[test]
    fn links_verify_and_refuse() {
        let key = b"k".repeat(32);
        let file = FileId::generate();
        let now = DateTime::from_timestamp(1_000, 0).unwrap();
        let link = url("https://f.example", &key, &file, 2_000, None);
        let q = query(&link);
        assert_eq!(verify(&key, file.as_str(), parts(&q), now), Ok(None));
        let later = DateTime::from_timestamp(2_000, 0).unwrap();
        assert_eq!(
            verify(&key, file.as_str(), parts(&q), later),
            Err(Refused::Expired)
        );
        let moved = LinkQuery {
            expires: Some("3000"),
            ..parts(&q)
        };
        assert_eq!(
            verify(&key, file.as_str(), moved, later),
            Err(Refused::Invalid)
        );
        let other = FileId::generate();
        assert_eq!(
            verify(&key, other.as_str(), parts(&q), now),
            Err(Refused::Invalid)
        );
        let unsigned = LinkQuery {
            signature: None,
            ..parts(&q)
        };
        assert_eq!(
            verify(&key, file.as_str(), unsigned, now),
            Err(Refused::Invalid)
        );
    }

    #[test]
    fn a_link_handed_to_a_key_names_it_and_cannot_lose_it() {
        let key = b"k".repeat(32);
        let file = FileId::generate();
        let holder = KeyId::generate();
        let now = DateTime::from_timestamp(1_000, 0).unwrap();
        let link = url("https://f.example", &key, &file, 2_000, Some(&holder));
        assert!(link.contains(&format!("&key={holder}&")), "{link}");
        let q = query(&link);
        assert_eq!(
            verify(&key, file.as_str(), parts(&q), now),
            Ok(Some(holder.clone()))
        );
        // Without its key, or with another, it is no link of this server's.
        let without = LinkQuery {
            holder: None,
            ..parts(&q)
        };
        assert_eq!(
            verify(&key, file.as_str(), without, now),
            Err(Refused::Invalid)
        );
        let other = KeyId::generate();
        let swapped = LinkQuery {
            holder: Some(other.as_str()),
            ..parts(&q)
        };
        assert_eq!(
            verify(&key, file.as_str(), swapped, now),
            Err(Refused::Invalid)
        );
        // Nor can a key be added to a link made without one.
        let plain = query(&url("https://f.example", &key, &file, 2_000, None));
        let added = LinkQuery {
            holder: Some(holder.as_str()),
            ..parts(&plain)
        };
        assert_eq!(
            verify(&key, file.as_str(), added, now),
            Err(Refused::Invalid)
        );
    }
}
