//! Management API keys: their format, checking the `Authorization` header of a management
//! request, and ending long-lived sessions when their key is revoked.

use axum::http::HeaderMap;
use base64::Engine;
use chrono::{DateTime, Utc};
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::config::Secret;
use crate::db::{self, models::ManagementKeyRow, Db};
use crate::error::ApiError;
use crate::model::ids::{KeyId, ProjectId};
use crate::model::state::KeyRole;

pub const KEY_PREFIX: &str = "hym_live_";
/// `hym_live_` and the first 8 characters of the random part: enough to tell keys apart
/// in `keys list`, far too little to guess the rest.
const DISPLAY_PREFIX_LENGTH: usize = 17;
const RANDOM_PART_LENGTH: usize = 43;

/// A key just made: the only moment the key itself exists outside its holder's hands.
#[derive(Debug)]
pub struct NewKey {
    pub row: ManagementKeyRow,
    pub key: Secret,
}

pub fn generate(name: &str, role: KeyRole, now: DateTime<Utc>) -> NewKey {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let key = format!(
        "{KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    NewKey {
        row: ManagementKeyRow {
            id: KeyId::generate(),
            name: name.to_string(),
            display_prefix: key[..DISPLAY_PREFIX_LENGTH].to_string(),
            key_digest: digest(&key),
            created_at: now,
            revoked_at: None,
            last_used_at: None,
            role,
            project_id: None,
            expires_at: None,
        },
        key: Secret::new(key),
    }
}

/// Hex SHA-256 of the whole key string: what the database stores instead of the key.
pub fn digest(key: &str) -> String {
    crate::digest::sha256_hex(key.as_bytes())
}

pub fn is_well_formed(key: &str) -> bool {
    key.strip_prefix(KEY_PREFIX).is_some_and(|random| {
        random.len() == RANDOM_PART_LENGTH
            && random
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// The credential of an `Authorization: Bearer …` value. A missing header, another
/// scheme or an empty credential is `authentication_required`.
pub fn bearer_credential(authorization: Option<&str>) -> Result<&str, ApiError> {
    let value = authorization
        .ok_or(ApiError::AuthenticationRequired)?
        .trim();
    let (scheme, credential) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::AuthenticationRequired);
    }
    let credential = credential.trim();
    if credential.is_empty() {
        return Err(ApiError::AuthenticationRequired);
    }
    Ok(credential)
}

/// The key a request was authenticated with.
#[derive(Debug, Clone)]
pub struct AuthenticatedKey {
    pub id: KeyId,
    pub name: String,
    pub role: KeyRole,
    /// The key's own project; `None`: a key for every project.
    pub project: Option<ProjectId>,
    /// What this request sees: the key's project, or the one project a key for every
    /// project narrowed its view to with the `Hymical-Project` header (the console's
    /// project switcher); `None`: every project.
    pub view: Option<ProjectId>,
}

impl AuthenticatedKey {
    /// Whether it may change state or take data out in bulk (mutations, exports): an
    /// `admin` key may; a `read` key gets `insufficient_role`.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.role {
            KeyRole::Admin => Ok(()),
            KeyRole::Read => Err(ApiError::InsufficientRole {
                role: self.role,
                required: KeyRole::Admin,
            }),
        }
    }

    /// Whether it may manage projects: an admin key of every project (a project's admin
    /// key manages its own project's keys only).
    pub fn require_installation_admin(&self) -> Result<(), ApiError> {
        self.require_admin()?;
        self.require_installation()
    }

    /// Whether the request sees the whole installation: a key of every project, not
    /// narrowed to one (the installation's figures, `/metrics`).
    pub fn require_installation(&self) -> Result<(), ApiError> {
        match (&self.project, &self.view) {
            (None, None) => Ok(()),
            _ => Err(ApiError::InstallationKeyRequired),
        }
    }

    /// Narrows the view to `project` (the `Hymical-Project` header). A project that does
    /// not exist, is deleted, or is not the key's own is `PROJECT_NOT_FOUND`, the same
    /// answer for each, so a key learns nothing of other projects from it.
    pub async fn narrowed(mut self, db: &Db, project: &str) -> Result<Self, ApiError> {
        let not_found = || ApiError::ProjectNotFound {
            project_id: project.to_string(),
        };
        let id = ProjectId::parse(project).ok_or_else(not_found)?;
        if self.project.as_ref().is_some_and(|own| *own != id) {
            return Err(not_found());
        }
        let live = db
            .run(async |conn| db::projects::find_live(conn, &id).await)
            .await?;
        if live.is_none() {
            return Err(not_found());
        }
        self.view = Some(id);
        Ok(self)
    }
}

/// The header a key for every project names one project with, to see only that one.
pub const PROJECT_HEADER: &str = "hymical-project";

/// Checks a key against the database on every call, so a revocation takes effect on the
/// next request. Malformed, unknown and revoked keys get the same answer.
pub async fn authenticate_key(
    db: &Db,
    credential: &str,
    now: DateTime<Utc>,
) -> Result<AuthenticatedKey, ApiError> {
    if !is_well_formed(credential) {
        return Err(ApiError::InvalidApiKey);
    }
    let presented = digest(credential);
    let row = db
        .run(async |conn| db::keys::find_by_digest(conn, &presented).await)
        .await?;
    let Some((row, project_deleted)) = row else {
        return Err(ApiError::InvalidApiKey);
    };
    // The lookup matched on the digest already; comparing again in constant time keeps the
    // check itself free of timing differences whatever the database did.
    let matches: bool = row.key_digest.as_bytes().ct_eq(presented.as_bytes()).into();
    // Revoked, expired, or of a deleted project: the same answer as an unknown key.
    let expired = row.expires_at.is_some_and(|at| at <= now);
    if !matches || row.revoked_at.is_some() || expired || project_deleted {
        return Err(ApiError::InvalidApiKey);
    }
    // Recorded at most once a minute: the row just read says whether it is due, so most
    // requests make no write. A failure to record the use must not fail the request.
    let granularity = chrono::Duration::seconds(60);
    let due = row.last_used_at.is_none_or(|at| at < now - granularity);
    if due {
        let touched = db
            .run(async |conn| db::keys::touch_last_used(conn, &row.id, now, granularity).await)
            .await;
        if let Err(error) = touched {
            tracing::warn!(key_id = %row.id, error = %error.summary(), "could not record key use");
        }
    }
    Ok(AuthenticatedKey {
        id: row.id,
        name: row.name,
        role: row.role,
        view: row.project_id.clone(),
        project: row.project_id,
    })
}

/// Authenticates a management request from its headers (never from the query string).
pub async fn authenticate_headers(
    db: &Db,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Result<AuthenticatedKey, ApiError> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .map(|value| value.to_str().map_err(|_| ApiError::InvalidApiKey))
        .transpose()?;
    let credential = bearer_credential(header)?;
    let key = authenticate_key(db, credential, now).await?;
    match headers.get(PROJECT_HEADER) {
        None => Ok(key),
        Some(value) => {
            let project = value.to_str().map_err(|_| ApiError::ProjectNotFound {
                project_id: String::new(),
            })?;
            key.narrowed(db, project.trim()).await
        }
    }
}

/// Long-lived sessions (GraphQL subscriptions) opened with a key end when the key is
/// revoked, in whichever process it was revoked: one query per process a second (the
/// `key_revocations` upkeep job) for all the keys in use, not one per session.
#[derive(Default)]
pub struct KeyRevocations {
    watched: std::sync::Mutex<std::collections::HashMap<KeyId, tokio::sync::watch::Sender<bool>>>,
}

impl KeyRevocations {
    /// Turns true once the key is revoked; watched for as long as a receiver lives.
    pub fn watch(&self, key: &AuthenticatedKey) -> tokio::sync::watch::Receiver<bool> {
        let mut watched = self.lock();
        watched
            .entry(key.id.clone())
            .or_insert_with(|| tokio::sync::watch::channel(false).0)
            .subscribe()
    }

    /// Tells the watchers of every watched key that is revoked or expired now (the
    /// `key_revocations` upkeep job, every second).
    pub async fn check(&self, db: &Db) {
        let ids: Vec<KeyId> = {
            let mut watched = self.lock();
            watched.retain(|_, sender| sender.receiver_count() > 0);
            watched.keys().cloned().collect()
        };
        if ids.is_empty() {
            return;
        }
        match db
            .run(async |conn| db::keys::unusable_among(conn, &ids, Utc::now()).await)
            .await
        {
            Ok(unusable) => {
                let mut watched = self.lock();
                for id in unusable {
                    if let Some(sender) = watched.remove(&id) {
                        let _ = sender.send(true);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(error = %error.summary(), "cannot check keys for revocation")
            }
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<KeyId, tokio::sync::watch::Sender<bool>>>
    {
        // The map holds plain senders; a panic while holding the lock cannot tear it.
        self.watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_documented_shape() {
        let new = generate("ops", KeyRole::Admin, Utc::now());
        let key = new.key.expose();
        assert!(key.starts_with("hym_live_"));
        assert_eq!(key.len(), 9 + 43);
        assert!(is_well_formed(key));
        assert_eq!(new.row.display_prefix, &key[..17]);
        assert_eq!(new.row.key_digest, digest(key));
        assert_eq!(new.row.key_digest.len(), 64);
        assert!(new.row.id.as_str().starts_with("mk_") && new.row.id.as_str().len() == 35);
        assert!(
            !format!("{new:?}").contains(key),
            "Debug must not show the key"
        );
    }

    #[test]
    fn malformed_keys_are_recognised() {
        let good = generate("x", KeyRole::Read, Utc::now())
            .key
            .expose()
            .to_string();
        assert!(is_well_formed(&good));
        assert!(!is_well_formed(&good[..good.len() - 1]));
        assert!(!is_well_formed(&format!("{good}A")));
        assert!(!is_well_formed(&good.replace("hym_live_", "hym_test_")));
        assert!(!is_well_formed(&format!("hym_live_{}", "+".repeat(43))));
    }

    #[test]
    fn bearer_parsing() {
        assert!(matches!(
            bearer_credential(None),
            Err(ApiError::AuthenticationRequired)
        ));
        assert!(matches!(
            bearer_credential(Some("Basic abc")),
            Err(ApiError::AuthenticationRequired)
        ));
        assert!(matches!(
            bearer_credential(Some("Bearer")),
            Err(ApiError::AuthenticationRequired)
        ));
        assert!(matches!(
            bearer_credential(Some("Bearer   ")),
            Err(ApiError::AuthenticationRequired)
        ));
        assert_eq!(bearer_credential(Some("bearer abc")).unwrap(), "abc");
        assert_eq!(bearer_credential(Some("Bearer  abc ")).unwrap(), "abc");
    }
}
