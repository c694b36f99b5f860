//! Queries on `submission_files` and `submission_file_chunks`: uploaded
//! files' rows and, for files kept in PostgreSQL, their bytes (docs/data-model.md).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::{submission_file_chunks, submission_files};
use super::DbError;
use crate::model::ids::{EndpointId, FileId, SubmissionId};

/// One uploaded file's row.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = submission_files)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct FileRow {
    pub id: FileId,
    pub endpoint_id: EndpointId,
    pub submission_id: Option<SubmissionId>,
    pub field: String,
    pub name: String,
    pub content_type: String,
    pub size_bytes: i64,
    pub sha256: Option<String>,
    /// `postgres` or `s3`.
    pub storage: String,
    pub object_key: Option<String>,
    pub position: i32,
    pub created_at: DateTime<Utc>,
    pub attached_at: Option<DateTime<Utc>>,
}

/// Writes a file's row before any of its bytes: unattached, empty, no digest yet.
pub async fn insert_pending(conn: &mut AsyncPgConnection, row: &FileRow) -> Result<(), DbError> {
    diesel::insert_into(submission_files::table)
        .values(row)
        .execute(conn)
        .await?;
    Ok(())
}

/// One piece of a file kept in PostgreSQL.
pub async fn insert_chunk(
    conn: &mut AsyncPgConnection,
    file: &FileId,
    seq: i32,
    data: &[u8],
) -> Result<(), DbError> {
    diesel::insert_into(submission_file_chunks::table)
        .values((
            submission_file_chunks::file_id.eq(file),
            submission_file_chunks::seq.eq(seq),
            submission_file_chunks::data.eq(data),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// Records a file's size and digest once every byte is stored.
pub async fn finish(
    conn: &mut AsyncPgConnection,
    file: &FileId,
    size_bytes: i64,
    sha256: &str,
) -> Result<(), DbError> {
    diesel::update(submission_files::table.find(file))
        .set((
            submission_files::size_bytes.eq(size_bytes),
            submission_files::sha256.eq(sha256),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// A submission's files, in the order they came.
pub async fn for_submission(
    conn: &mut AsyncPgConnection,
    submission: &SubmissionId,
) -> Result<Vec<FileRow>, DbError> {
    Ok(submission_files::table
        .filter(submission_files::submission_id.eq(submission))
        .order(submission_files::position)
        .select(FileRow::as_select())
        .load(conn)
        .await?)
}

/// A file that belongs to a submission (what may be downloaded).
pub async fn find_attached(
    conn: &mut AsyncPgConnection,
    file: &FileId,
) -> Result<Option<FileRow>, DbError> {
    Ok(submission_files::table
        .find(file)
        .filter(submission_files::submission_id.is_not_null())
        .select(FileRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Piece `seq` of a file kept in PostgreSQL; `None` past its last.
pub async fn chunk(
    conn: &mut AsyncPgConnection,
    file: &FileId,
    seq: i32,
) -> Result<Option<Vec<u8>>, DbError> {
    Ok(submission_file_chunks::table
        .find((file, seq))
        .select(submission_file_chunks::data)
        .first(conn)
        .await
        .optional()?)
}

/// Of `ids`, the files no submission holds (what a refused or replayed request leaves).
pub async fn unattached_among(
    conn: &mut AsyncPgConnection,
    ids: &[FileId],
) -> Result<Vec<FileRow>, DbError> {
    Ok(submission_files::table
        .filter(submission_files::id.eq_any(ids))
        .filter(submission_files::submission_id.is_null())
        .select(FileRow::as_select())
        .load(conn)
        .await?)
}

/// Files without a submission that may go: detached by an erase (`attached_at` set) or
/// never attached and older than `cutoff` (an upload that was abandoned or crashed).
pub async fn sweepable(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<FileRow>, DbError> {
    Ok(submission_files::table
        .filter(submission_files::submission_id.is_null())
        .filter(
            submission_files::attached_at
                .is_not_null()
                .or(submission_files::created_at.lt(cutoff)),
        )
        .order(submission_files::created_at)
        .limit(limit)
        .select(FileRow::as_select())
        .load(conn)
        .await?)
}

/// Deletes the rows of `ids` (and so the bytes of those kept in PostgreSQL) that no
/// submission holds; answers how many.
pub async fn delete_unattached(
    conn: &mut AsyncPgConnection,
    ids: &[FileId],
) -> Result<usize, DbError> {
    Ok(diesel::delete(
        submission_files::table
            .filter(submission_files::id.eq_any(ids))
            .filter(submission_files::submission_id.is_null()),
    )
    .execute(conn)
    .await?)
}
