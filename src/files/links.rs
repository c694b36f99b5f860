//! Signed download links: `{FORMS_PUBLIC_URL}/files/{id}?expires={unix}&signature={hex}`,
//! the signature HMAC-SHA256 of `{id}.{expires}` under the server's `file_links` key
//! (made once, kept in `server_secrets`, so that every process signs and checks alike).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use subtle::ConstantTimeEq;

use crate::db::{Db, DbError};
use crate::model::ids::FileId;

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

fn signature(key: &[u8], file: &str, expires: i64) -> String {
    crate::digest::hmac_sha256_hex(key, format!("{file}.{expires}").as_bytes())
}

/// The link to `file` valid until `expires`.
pub fn url(public_url: &str, key: &[u8], file: &FileId, expires: i64) -> String {
    format!(
        "{public_url}/files/{file}?expires={expires}&signature={}",
        signature(key, file.as_str(), expires)
    )
}

/// Why a link does not open its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its signature does not match (tampered, or made with another key).
    Invalid,
    /// Genuine, but its time is up.
    Expired,
}

/// Checks a link's parameters: the signature first, so a changed `expires` is a
/// tampered link, not an expired one.
pub fn verify(
    key: &[u8],
    file: &str,
    expires: Option<&str>,
    given: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(), Refused> {
    let (Some(expires), Some(given)) = (expires, given) else {
        return Err(Refused::Invalid);
    };
    let Ok(expires_at) = expires.parse::<i64>() else {
        return Err(Refused::Invalid);
    };
    let expected = signature(key, file, expires_at);
    if !bool::from(expected.as_bytes().ct_eq(given.as_bytes())) {
        return Err(Refused::Invalid);
    }
    if now.timestamp() >= expires_at {
        return Err(Refused::Expired);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_verify_and_refuse() {
        let key = b"k".repeat(32);
        let file = FileId::generate();
        let now = DateTime::from_timestamp(1_000, 0).unwrap();
        let link = url("https://f.example", &key, &file, 2_000);
        let query = link.split_once('?').unwrap().1;
        let (expires, signature) = query.split_once('&').unwrap();
        let expires = expires.strip_prefix("expires=");
        let signature = signature.strip_prefix("signature=");
        assert_eq!(verify(&key, file.as_str(), expires, signature, now), Ok(()));
        let later = DateTime::from_timestamp(2_000, 0).unwrap();
        assert_eq!(
            verify(&key, file.as_str(), expires, signature, later),
            Err(Refused::Expired)
        );
        assert_eq!(
            verify(&key, file.as_str(), Some("3000"), signature, later),
            Err(Refused::Invalid)
        );
        let other = FileId::generate();
        assert_eq!(
            verify(&key, other.as_str(), expires, signature, now),
            Err(Refused::Invalid)
        );
        assert_eq!(
            verify(&key, file.as_str(), expires, None, now),
            Err(Refused::Invalid)
        );
    }
}
