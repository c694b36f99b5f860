//! Uploaded files (docs/intake.md, "Files"): keeping their bytes in PostgreSQL or
//! S3-compatible object storage as they stream in (`storage.rs`, the only outbound HTTP
//! besides delivery: to the object storage, inside its client), the signed links that
//! download them and the route that serves them (`links.rs`, `routes.rs`), and removing
//! what no submission holds: uploads of refused requests at once, abandoned ones and
//! erased submissions' files by the sweeper (here). Intake receives the file parts
//! (`intake/files.rs`) and stores them through this module.
//!
//! A file's row is written before any of its bytes, so whatever was stored can always be
//! found again from the rows (a crash mid-upload included); the outbox statement attaches
//! the rows to their submission in the transaction that writes it.

pub mod links;
pub mod routes;
pub mod storage;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::OnceCell;

use crate::clock::Clock;
use crate::config::FilesConfig;
use crate::db::files::FileRow;
use crate::db::{Db, DbError};
use crate::model::ids::{FileId, KeyId, SubmissionId};
use storage::Storage;

/// How many files one sweep statement reads at most.
const SWEEP_BATCH: i64 = 100;

/// [`Files`] as the download route's state.
#[derive(Clone)]
pub struct FilesState(pub Arc<Files>);

impl std::ops::Deref for FilesState {
    type Target = Files;

    fn deref(&self) -> &Files {
        &self.0
    }
}

/// The files of this process: storage, the link key, the settings.
pub struct Files {
    pub db: Db,
    pub storage: Storage,
    pub config: FilesConfig,
    pub clock: Arc<dyn Clock>,
    /// The key that signs download links, read (or made) once from `server_secrets`.
    link_key: OnceCell<Arc<[u8]>>,
}

/// A file as a webhook, an email and the API describe it: never its bytes.
#[derive(Debug, Clone, Serialize)]
pub struct FileMetadata {
    pub id: FileId,
    pub field: String,
    pub name: String,
    pub size: i64,
    pub content_type: String,
    pub sha256: String,
    /// A signed link that downloads it until `url_expires_at`.
    pub url: String,
    pub url_expires_at: String,
}

impl Files {
    pub fn new(config: FilesConfig, db: Db, clock: Arc<dyn Clock>) -> Files {
        Files {
            storage: Storage::from_config(config.s3.as_ref()),
            db,
            config,
            clock,
            link_key: OnceCell::new(),
        }
    }

    /// The link key, from the database the first time.
    pub async fn link_key(&self) -> Result<Arc<[u8]>, DbError> {
        self.link_key
            .get_or_try_init(|| links::load_key(&self.db))
            .await
            .cloned()
    }

    /// The files of a submission with links that expire `ttl` after `from`.
    pub async fn metadata(
        &self,
        submission: &SubmissionId,
        from: DateTime<Utc>,
    ) -> Result<Vec<FileMetadata>, DbError> {
        let rows = self
            .db
            .run(async |conn| crate::db::files::for_submission(conn, submission).await)
            .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let key = self.link_key().await?;
        let expires = links::expiry(from, self.config.link_ttl);
        Ok(rows
            .into_iter()
            .map(|row| self.describe(row, &key, expires, None))
            .collect())
    }

    /// One file's description with a link that expires at `expires` (Unix seconds) and,
    /// handed to an API key (`holder`), ends when that key is revoked.
    pub fn describe(
        &self,
        row: FileRow,
        key: &[u8],
        expires: i64,
        holder: Option<&KeyId>,
    ) -> FileMetadata {
        let url = links::url(&self.config.public_url, key, &row.id, expires, holder);
        FileMetadata {
            url,
            url_expires_at: DateTime::from_timestamp(expires, 0)
                .map(crate::clock::format_timestamp)
                .unwrap_or_default(),
            size: row.size_bytes,
            sha256: row.sha256.unwrap_or_default(),
            content_type: row.content_type,
            name: row.name,
            field: row.field,
            id: row.id,
        }
    }

    /// Removes those of `ids` that no submission holds, bytes first and then rows (so a
    /// failure leaves rows the sweeper finds). Attached files are left alone: the caller
    /// may not know whether its submission committed.
    pub async fn discard(&self, ids: &[FileId]) -> Result<usize, DbError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let rows = self
            .db
            .run(async |conn| crate::db::files::unattached_among(conn, ids).await)
            .await?;
        self.remove(rows).await
    }

    /// Deletes the objects of `rows` (those kept in object storage) and then the rows
    /// whose bytes are gone; a row whose object could not be deleted stays for the next
    /// sweep.
    async fn remove(&self, rows: Vec<FileRow>) -> Result<usize, DbError> {
        let mut gone = Vec::with_capacity(rows.len());
        for row in rows {
            match self.storage.delete(&row).await {
                Ok(()) => gone.push(row.id),
                Err(error) => {
                    tracing::warn!(file_id = %row.id, error = %error, "cannot delete an uploaded file's object; the sweeper tries again")
                }
            }
        }
        if gone.is_empty() {
            return Ok(0);
        }
        self.db
            .run(async |conn| crate::db::files::delete_unattached(conn, &gone).await)
            .await
    }

    /// Removes every file no submission holds that may go: those of erased submissions,
    /// and uploads never attached that are older than the grace period (abandoned,
    /// refused but not cleaned up, or cut by a crash). Answers how many.
    pub async fn sweep(&self) -> Result<usize, DbError> {
        let grace =
            chrono::Duration::from_std(self.config.sweep_grace).unwrap_or(chrono::Duration::MAX);
        let cutoff = self
            .clock
            .now()
            .checked_sub_signed(grace)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut total = 0;
        loop {
            let rows = self
                .db
                .run(async |conn| crate::db::files::sweepable(conn, cutoff, SWEEP_BATCH).await)
                .await?;
            let read = rows.len();
            let removed = self.remove(rows).await?;
            total += removed;
            // Fewer than a batch, or some that cannot go now: the next sweep goes on.
            if read < SWEEP_BATCH as usize || removed < read {
                return Ok(total);
            }
        }
    }

    /// [`Files::sweep`], logged: after an erase and on the workers' hourly pruning.
    pub async fn sweep_logged(&self) {
        match self.sweep().await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "removed uploaded files no submission holds"),
            Err(error) => {
                tracing::warn!(error = %error.summary(), "cannot sweep uploaded files; the next sweep tries again")
            }
        }
    }
}
