//! The GraphQL side of file uploads: an endpoint's file settings (`Endpoint.fileUploads`,
//! the `fileUploads` input of createEndpoint and updateEndpoint) and a submission's files
//! with fresh download links (`Submission.files`).

use async_graphql::{Context, InputObject, Object, SimpleObject, ID};

use super::error::Result;
use super::{app, database};
use crate::auth::AuthenticatedKey;
use crate::db::files::FileRow;
use crate::error::ApiError;
use crate::model::files::{FileSettingError, FileUploadSettings};
use crate::model::ids::SubmissionId;

/// An endpoint's file uploads: multipart file parts within these limits, of these types
/// (judged from each file's first bytes; programs are refused always). docs/intake.md,
/// "Files".
#[derive(SimpleObject)]
pub struct FileUploads {
    /// Files per submission.
    pub max_files: i32,
    /// Bytes per file.
    pub max_file_bytes: i32,
    /// Bytes of a submission's files together.
    pub max_total_bytes: i32,
    /// Media types (`image/png`) and families (`image/*`) accepted.
    pub allowed_types: Vec<String>,
}

impl From<FileUploadSettings> for FileUploads {
    fn from(settings: FileUploadSettings) -> Self {
        let int = |value: i64| i32::try_from(value).unwrap_or(i32::MAX);
        FileUploads {
            max_files: settings.max_files,
            max_file_bytes: int(settings.max_file_bytes),
            max_total_bytes: int(settings.max_total_bytes),
            allowed_types: settings.allowed_types,
        }
    }
}

/// Turns file uploads on with these settings; each one left out takes its default (5
/// files, 10 MiB each, 25 MiB together, pictures, PDF, text, CSV and office documents).
#[derive(InputObject)]
pub struct FileUploadsInput {
    pub max_files: Option<i32>,
    pub max_file_bytes: Option<i32>,
    pub max_total_bytes: Option<i32>,
    pub allowed_types: Option<Vec<String>>,
}

impl FileUploadsInput {
    /// The settings to store, as JSON, or the input field that breaks its rule.
    pub fn settings(self) -> Result<serde_json::Value, ApiError> {
        let defaults = FileUploadSettings::default();
        let settings = FileUploadSettings {
            max_files: self.max_files.unwrap_or(defaults.max_files),
            max_file_bytes: self
                .max_file_bytes
                .map_or(defaults.max_file_bytes, i64::from),
            max_total_bytes: self
                .max_total_bytes
                .map_or(defaults.max_total_bytes, i64::from),
            allowed_types: self.allowed_types.unwrap_or(defaults.allowed_types),
        }
        .validated()
        .map_err(
            |FileSettingError { setting, reason }| ApiError::InvalidInput {
                field: format!("fileUploads.{setting}"),
                reason: reason.to_string(),
            },
        )?;
        serde_json::to_value(settings)
            .map_err(|_| ApiError::Internal("file settings do not serialise".into()))
    }
}

/// A file uploaded with a submission. Its bytes are never in the API: `downloadUrl`
/// fetches them.
pub struct SubmissionFile {
    row: FileRow,
    url: String,
    url_expires_at: String,
}

#[Object]
impl SubmissionFile {
    async fn id(&self) -> ID {
        ID(self.row.id.to_string())
    }
    /// The form field it came in.
    async fn field(&self) -> &str {
        &self.row.field
    }
    /// The file name the client sent (display only).
    async fn name(&self) -> &str {
        &self.row.name
    }
    /// Its size in bytes.
    async fn size(&self) -> i64 {
        self.row.size_bytes
    }
    /// The type judged from its content when it was uploaded.
    async fn content_type(&self) -> &str {
        &self.row.content_type
    }
    /// The SHA-256 of its bytes, in lowercase hex.
    async fn sha256(&self) -> Option<&str> {
        self.row.sha256.as_deref()
    }
    /// A signed link to its bytes, made for this answer and valid for
    /// `FORMS_FILE_LINK_TTL_SECONDS` (7 days by default) from now, and only while the API
    /// key that asked is not revoked.
    async fn download_url(&self) -> &str {
        &self.url
    }
    /// When `downloadUrl` stops working (RFC 3339).
    async fn download_url_expires_at(&self) -> &str {
        &self.url_expires_at
    }
}

/// The files of `submission`, with links valid from now.
pub async fn of_submission(
    ctx: &Context<'_>,
    submission: &SubmissionId,
) -> Result<Vec<SubmissionFile>> {
    let app = app(ctx);
    let rows = database(ctx)
        .run(async |conn| crate::db::files::for_submission(conn, submission).await)
        .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // The links name the key they are handed to, and end when it is revoked.
    let holder = &ctx
        .data::<AuthenticatedKey>()
        .map_err(|_| ApiError::Internal("an operation without its key".into()))?
        .id;
    let key = app.files.link_key().await?;
    let expires = crate::files::links::expiry(app.clock.now(), app.config.files.link_ttl);
    Ok(rows
        .into_iter()
        .map(|row| {
            let described = app.files.describe(row.clone(), &key, expires, Some(holder));
            SubmissionFile {
                row,
                url: described.url,
                url_expires_at: described.url_expires_at,
            }
        })
        .collect())
}
