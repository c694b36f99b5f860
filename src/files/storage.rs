//! Where a file's bytes go: rows of `submission_file_chunks` (the default, which needs
//! nothing beyond the database) or one object in S3-compatible storage (`FORMS_S3_*`),
//! written as the part streams in, never the whole file in memory. The S3 client
//! (object_store, over reqwest and rustls) lives here and nowhere else.

use std::sync::Arc;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, WriteMultipart};

use crate::config::S3Config;
use crate::db::files::FileRow;
use crate::db::{Db, DbError};
use crate::model::ids::{EndpointId, FileId};

/// The size of one `submission_file_chunks` row: big enough that a 100 MB file is 400
/// rows (a statement each), small enough that an upload holds little memory and a row
/// stays far below PostgreSQL's 1 GB field limit.
pub const PG_CHUNK_BYTES: usize = 256 * 1024;

/// The part size of an object's multipart upload: S3's minimum (5 MiB) for every part but
/// the last. At most [`S3_PARTS_IN_FLIGHT`] parts are sent at once, so an upload holds at
/// most a few parts in memory whatever the file's size.
const S3_PART_BYTES: usize = 5 * 1024 * 1024;
const S3_PARTS_IN_FLIGHT: usize = 2;

/// What one upload is counted for against `FORMS_HTTP_MAX_BUFFERED_BODY_BYTES` while it
/// streams, beside the buffered bodies of other requests: its storage's window (one row,
/// or the parts in flight and the one filling) and the parser's and connection's buffers
/// around it (measured at a few MB an upload, docs/BENCHMARKS.md).
const PG_UPLOAD_MEMORY: usize = 2 * 1024 * 1024;
const S3_UPLOAD_MEMORY: usize = (S3_PARTS_IN_FLIGHT + 1) * S3_PART_BYTES + 2 * 1024 * 1024;

#[derive(Clone)]
pub enum Storage {
    Postgres,
    S3(Arc<dyn ObjectStore>),
    /// `FORMS_S3_*` is set but the client could not be made (logged at start): every
    /// upload fails with 503 rather than land somewhere else.
    Unavailable(Arc<str>),
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("database: {}", .0.summary())]
    Db(#[from] DbError),
    #[error("object storage: {0}")]
    Object(#[from] object_store::Error),
    #[error("object storage is not available: {0}")]
    Unavailable(Arc<str>),
}

impl Storage {
    pub fn from_config(s3: Option<&S3Config>) -> Storage {
        let Some(s3) = s3 else {
            return Storage::Postgres;
        };
        let built = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&s3.endpoint)
            .with_bucket_name(&s3.bucket)
            .with_region(&s3.region)
            .with_access_key_id(&s3.access_key_id)
            .with_secret_access_key(s3.secret_access_key.expose())
            .with_virtual_hosted_style_request(!s3.path_style)
            .with_allow_http(s3.endpoint.starts_with("http://"))
            .build();
        match built {
            Ok(store) => Storage::S3(Arc::new(store)),
            Err(error) => {
                tracing::error!(error = %error, "cannot set up the S3 client (FORMS_S3_*); uploads will be refused");
                Storage::Unavailable(error.to_string().into())
            }
        }
    }

    /// The memory one upload is counted for while it streams (see [`PG_UPLOAD_MEMORY`]).
    pub fn upload_memory(&self) -> usize {
        match self {
            Storage::Postgres => PG_UPLOAD_MEMORY,
            Storage::S3(_) | Storage::Unavailable(_) => S3_UPLOAD_MEMORY,
        }
    }

    /// What a new file's row records as its storage, and its object key.
    pub fn placement(
        &self,
        endpoint: &EndpointId,
        file: &FileId,
    ) -> (&'static str, Option<String>) {
        match self {
            Storage::Postgres => ("postgres", None),
            Storage::S3(_) | Storage::Unavailable(_) => {
                ("s3", Some(format!("files/{endpoint}/{file}")))
            }
        }
    }

    /// A writer for the file of `row` (its row is written already).
    pub async fn writer(&self, db: &Db, row: &FileRow) -> Result<Writer, StorageError> {
        match (self, row.object_key.as_deref()) {
            (Storage::Postgres, _) => Ok(Writer::Postgres {
                db: db.clone(),
                file: row.id.clone(),
                buffer: BytesMut::with_capacity(PG_CHUNK_BYTES),
                seq: 0,
            }),
            (Storage::S3(store), Some(key)) => {
                let upload = store.put_multipart(&ObjectPath::from(key)).await?;
                Ok(Writer::S3(WriteMultipart::new_with_chunk_size(
                    upload,
                    S3_PART_BYTES,
                )))
            }
            (Storage::Unavailable(reason), _) => Err(StorageError::Unavailable(reason.clone())),
            (Storage::S3(_), None) => Err(StorageError::Unavailable(
                "a file row for object storage has no object key".into(),
            )),
        }
    }

    /// The bytes of `row`, as a body that streams them.
    pub async fn read(&self, db: &Db, row: &FileRow) -> Result<Body, StorageError> {
        if row.storage == "postgres" {
            let db = db.clone();
            let file = row.id.clone();
            let chunks = futures_util::stream::unfold(Some(0i32), move |seq| {
                let (db, file) = (db.clone(), file.clone());
                async move {
                    let seq = seq?;
                    let read = db
                        .run(async |conn| crate::db::files::chunk(conn, &file, seq).await)
                        .await;
                    match read {
                        Ok(Some(data)) => Some((Ok(Bytes::from(data)), Some(seq + 1))),
                        Ok(None) => None,
                        Err(error) => Some((
                            Err(std::io::Error::other(error.summary().to_string())),
                            None,
                        )),
                    }
                }
            });
            return Ok(Body::from_stream(chunks));
        }
        let store = self.object_store()?;
        let key = row.object_key.as_deref().unwrap_or_default();
        let stream = store
            .get(&ObjectPath::from(key))
            .await?
            .into_stream()
            .map(|piece| piece.map_err(std::io::Error::other));
        Ok(Body::from_stream(stream))
    }

    /// Deletes the bytes of `row` kept in object storage (an object that is not there
    /// any more counts as deleted). Bytes kept in PostgreSQL go with the row.
    pub async fn delete(&self, row: &FileRow) -> Result<(), StorageError> {
        let Some(key) = row.object_key.as_deref() else {
            return Ok(());
        };
        match self.object_store()?.delete(&ObjectPath::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    fn object_store(&self) -> Result<&Arc<dyn ObjectStore>, StorageError> {
        match self {
            Storage::S3(store) => Ok(store),
            Storage::Unavailable(reason) => Err(StorageError::Unavailable(reason.clone())),
            Storage::Postgres => Err(StorageError::Unavailable(
                "a file is in object storage but FORMS_S3_* is not set".into(),
            )),
        }
    }
}

/// Writes one file's bytes as they arrive.
pub enum Writer {
    Postgres {
        db: Db,
        file: FileId,
        buffer: BytesMut,
        seq: i32,
    },
    S3(WriteMultipart),
}

impl Writer {
    pub async fn write(&mut self, mut data: &[u8]) -> Result<(), StorageError> {
        match self {
            Writer::Postgres {
                db,
                file,
                buffer,
                seq,
            } => {
                while !data.is_empty() {
                    let room = PG_CHUNK_BYTES - buffer.len();
                    let take = room.min(data.len());
                    buffer.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if buffer.len() == PG_CHUNK_BYTES {
                        flush(db, file, buffer, seq).await?;
                    }
                }
                Ok(())
            }
            Writer::S3(upload) => {
                upload.wait_for_capacity(S3_PARTS_IN_FLIGHT).await?;
                upload.write(data);
                Ok(())
            }
        }
    }

    /// Stores what is left; the file is complete.
    pub async fn finish(self) -> Result<(), StorageError> {
        match self {
            Writer::Postgres {
                db,
                file,
                mut buffer,
                mut seq,
            } => flush(&db, &file, &mut buffer, &mut seq).await,
            Writer::S3(upload) => {
                upload.finish().await?;
                Ok(())
            }
        }
    }

    /// Gives up: an object's parts are aborted (the rows of either kind go with the file's
    /// row, which the caller removes).
    pub async fn abort(self) {
        if let Writer::S3(upload) = self {
            if let Err(error) = upload.abort().await {
                tracing::warn!(error = %error, "cannot abort an object upload");
            }
        }
    }
}

/// Writes the buffered piece of a file kept in PostgreSQL as its next row.
async fn flush(
    db: &Db,
    file: &FileId,
    buffer: &mut BytesMut,
    seq: &mut i32,
) -> Result<(), StorageError> {
    if buffer.is_empty() {
        return Ok(());
    }
    let piece = buffer.split().freeze();
    let at = *seq;
    db.run(async |conn| crate::db::files::insert_chunk(conn, file, at, &piece).await)
        .await?;
    *seq += 1;
    Ok(())
}
