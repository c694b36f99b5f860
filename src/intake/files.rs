//! Receiving a multipart body with files for an endpoint that takes them (storage, links
//! and the sweeper are `crate::files`): text parts are
//! collected as intake always collects them (within `FORMS_MAX_BODY_BYTES` together), file
//! parts stream into storage as they arrive, each judged by its first bytes before
//! anything of it is stored, and counted against the endpoint's limits as it grows.
//! Whatever was stored is held by an [`Uploads`] until the request is answered: removed
//! then unless its submission was written with it, and removed as well should the
//! request be dropped (a client gone, a server stopping).

use std::sync::Arc;

use axum::body::Body;
use bytes::BytesMut;
use sha2::{Digest, Sha256};

use super::parse::{malformed, multipart_reason, part_file_name, PartCount};
use crate::config::IntakeConfig;
use crate::db::files::FileRow;
use crate::error::ApiError;
use crate::files::storage::{StorageError, Writer};
use crate::files::Files;
use crate::model::files::{judge, name_agrees, FileUploadSettings, Judged, SNIFF_BYTES};
use crate::model::ids::{EndpointId, FileId};

/// The files a request stored, until it is answered.
pub struct Uploads {
    files: Arc<Files>,
    ids: Vec<FileId>,
    /// The SHA-256 of each file stored whole, in order (for the idempotency fingerprint).
    digests: Vec<String>,
}

impl Uploads {
    pub fn new(files: Arc<Files>) -> Uploads {
        Uploads {
            files,
            ids: Vec::new(),
            digests: Vec::new(),
        }
    }

    pub fn ids(&self) -> &[FileId] {
        &self.ids
    }

    /// The SHA-256 of each file, in order.
    pub fn digests(&self) -> &[String] {
        &self.digests
    }

    /// Once the request is answered: removes what no submission holds (all of it for a
    /// refused request, a tripped honeypot or an idempotent replay; nothing when the
    /// submission was written with its files).
    pub async fn settle(mut self) {
        let ids = std::mem::take(&mut self.ids);
        if let Err(error) = self.files.discard(&ids).await {
            tracing::warn!(error = %error.summary(), "cannot remove the files of a request that stored no submission; the sweeper removes them later");
        }
    }
}

impl Uploads {
    /// Leaves what was stored to the sweeper (see `accept_with_files`): nothing is
    /// removed now.
    pub fn leave_to_sweeper(mut self) {
        self.ids.clear();
    }
}

impl Drop for Uploads {
    /// A request dropped before it was answered (the client went away mid-body): what it
    /// stored is removed in the background.
    fn drop(&mut self) {
        if self.ids.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.ids);
        let files = self.files.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = files.discard(&ids).await {
                    tracing::warn!(error = %error.summary(), "cannot remove the files of an abandoned request; the sweeper removes them later");
                }
            });
        }
    }
}

fn unavailable(error: StorageError) -> ApiError {
    match error {
        StorageError::Db(error) => ApiError::from(error),
        other => ApiError::FileStorageUnavailable(other.to_string()),
    }
}

/// Reads the multipart `body` to its end: answers its text pairs in order, the stored
/// files in `uploads` (in order too). The text parts together may hold
/// `FORMS_MAX_BODY_BYTES`; the whole body `limit_bytes`. A file part's name follows the
/// rule of every field name.
pub async fn receive(
    endpoint: &EndpointId,
    settings: &FileUploadSettings,
    content_type: &str,
    body: Body,
    limits: &IntakeConfig,
    limit_bytes: usize,
    uploads: &mut Uploads,
) -> Result<Vec<(String, String)>, ApiError> {
    let files = uploads.files.clone();
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| malformed("the multipart content type has no boundary"))?;
    let constraints = multer::Constraints::new().size_limit(
        multer::SizeLimit::new().whole_stream(u64::try_from(limit_bytes).unwrap_or(u64::MAX)),
    );
    let mut multipart =
        multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
    // Past the whole body's limit multer says so: that is a 413, not a malformed body.
    let refused = |error: multer::Error| match error {
        multer::Error::StreamSizeExceeded { .. } => ApiError::RequestBodyTooLarge { limit_bytes },
        other => malformed(multipart_reason(&other)),
    };
    let mut pairs = Vec::new();
    // Every part is counted as it is read (parse.rs): text values and file inputs left
    // empty against `FORMS_MAX_FIELDS`, so a flood of empty parts ends at the first one
    // too many, and every part's headers, name and text against `FORMS_MAX_BODY_BYTES`.
    let mut parts = PartCount::new(limits);
    let mut total_bytes = 0i64;
    let mut count = 0i32;
    loop {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(error) => return Err(refused(error)),
        };
        let name = field.name().unwrap_or_default().to_string();
        let Some(file_name) = part_file_name(field.headers())? else {
            parts.value()?;
            parts.part(field.headers(), &name)?;
            let mut value = Vec::new();
            while let Some(piece) = field.chunk().await.map_err(refused)? {
                parts.bytes(piece.len())?;
                value.extend_from_slice(&piece);
            }
            let value = String::from_utf8(value)
                .map_err(|_| malformed("a multipart value is not valid UTF-8"))?;
            pairs.push((name, value));
            continue;
        };
        parts.part(field.headers(), &name)?;
        super::fields::check_name(&name, limits)?;
        // The first bytes, to judge the type by before anything is stored.
        let mut start = BytesMut::new();
        let mut ended = false;
        while start.len() < SNIFF_BYTES {
            match field.chunk().await.map_err(refused)? {
                Some(piece) => start.extend_from_slice(&piece),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        // A file input left empty: browsers send the part with no name and no bytes.
        if ended && start.is_empty() && file_name.is_empty() {
            parts.value()?;
            continue;
        }
        count += 1;
        if count > settings.max_files {
            return Err(ApiError::TooManyFiles {
                limit: settings.max_files,
            });
        }
        let sniff = &start[..start.len().min(SNIFF_BYTES)];
        let content_type = match judge(sniff, &file_name) {
            Judged::Executable(kind) => {
                return Err(ApiError::FileTypeNotAllowed {
                    field: name,
                    detected: kind.to_string(),
                    executable: true,
                })
            }
            Judged::Type(kind) if !settings.allows(&kind) => {
                return Err(ApiError::FileTypeNotAllowed {
                    field: name,
                    detected: kind,
                    executable: false,
                })
            }
            Judged::Type(kind) => kind,
        };
        // The name a receiver saves the file under must say what it is: an SVG judged
        // text is no `x.svg` (docs/intake.md, "Files").
        if !name_agrees(&content_type, sniff, &file_name) {
            return Err(ApiError::FileNameNotAllowed {
                field: name,
                detected: content_type,
            });
        }
        let limit = |limit: &'static str, limit_bytes: i64, field: &str| ApiError::FileTooLarge {
            field: field.to_string(),
            limit,
            limit_bytes,
        };
        let mut size = 0i64;
        let check = |more: usize, size: &mut i64, total: &mut i64| {
            let more = i64::try_from(more).unwrap_or(i64::MAX);
            *size = size.saturating_add(more);
            *total = total.saturating_add(more);
            if *size > settings.max_file_bytes {
                return Err(limit("max_file_bytes", settings.max_file_bytes, &name));
            }
            if *total > settings.max_total_bytes {
                return Err(limit("max_total_bytes", settings.max_total_bytes, &name));
            }
            Ok(())
        };
        check(start.len(), &mut size, &mut total_bytes)?;

        // The row first, then the bytes: whatever is stored can be found from the rows.
        let id = FileId::generate();
        let (storage, object_key) = files.storage.placement(endpoint, &id);
        let row = FileRow {
            id: id.clone(),
            endpoint_id: endpoint.clone(),
            submission_id: None,
            field: name.clone(),
            name: file_name,
            content_type,
            size_bytes: 0,
            sha256: None,
            storage: storage.to_string(),
            object_key,
            position: count - 1,
            created_at: files.clock.now(),
            attached_at: None,
        };
        files
            .db
            .run(async |conn| crate::db::files::insert_pending(conn, &row).await)
            .await?;
        uploads.ids.push(id.clone());
        let mut writer = files
            .storage
            .writer(&files.db, &row)
            .await
            .map_err(unavailable)?;
        let mut hash = Sha256::new();
        let streamed: Result<(), ApiError> = async {
            hash.update(&start);
            writer.write(&start).await.map_err(unavailable)?;
            drop(start);
            while let Some(piece) = field.chunk().await.map_err(refused)? {
                check(piece.len(), &mut size, &mut total_bytes)?;
                hash.update(&piece);
                writer.write(&piece).await.map_err(unavailable)?;
            }
            Ok(())
        }
        .await;
        if let Err(error) = streamed {
            abort(writer).await;
            return Err(error);
        }
        writer.finish().await.map_err(unavailable)?;
        let sha256 = hex::encode(hash.finalize());
        files
            .db
            .run(async |conn| crate::db::files::finish(conn, &id, size, &sha256).await)
            .await?;
        uploads.digests.push(sha256);
    }
    Ok(pairs)
}

async fn abort(writer: Writer) {
    writer.abort().await;
}
