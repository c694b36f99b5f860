//! Queries on `management_api_keys`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::ManagementKeyRow;
use super::schema::{management_api_keys, projects};
use super::DbError;
use crate::model::ids::KeyId;

pub async fn insert(conn: &mut AsyncPgConnection, row: &ManagementKeyRow) -> Result<(), DbError> {
    diesel::insert_into(management_api_keys::table)
        .values(row)
        .execute(conn)
        .await?;
    Ok(())
}

/// Every key, revoked ones included, oldest first.
pub async fn list(conn: &mut AsyncPgConnection) -> Result<Vec<ManagementKeyRow>, DbError> {
    Ok(management_api_keys::table
        .order((management_api_keys::created_at, management_api_keys::id))
        .select(ManagementKeyRow::as_select())
        .load(conn)
        .await?)
}

/// How many keys were ever made, revoked ones included.
pub async fn count(conn: &mut AsyncPgConnection) -> Result<i64, DbError> {
    Ok(management_api_keys::table.count().get_result(conn).await?)
}

/// The key with this digest, and whether its project is deleted.
pub async fn find_by_digest(
    conn: &mut AsyncPgConnection,
    digest: &str,
) -> Result<Option<(ManagementKeyRow, bool)>, DbError> {
    Ok(management_api_keys::table
        .left_join(projects::table)
        .filter(management_api_keys::key_digest.eq(digest))
        .select((
            ManagementKeyRow::as_select(),
            projects::deleted_at.nullable().is_not_null(),
        ))
        .first(conn)
        .await
        .optional()?)
}

pub async fn find(
    conn: &mut AsyncPgConnection,
    id: &KeyId,
) -> Result<Option<ManagementKeyRow>, DbError> {
    Ok(management_api_keys::table
        .find(id)
        .select(ManagementKeyRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Renames a key (`name`) and sets or clears its expiry (`expires_at`: `Some(None)`
/// clears); returns the row as it now stands, `None` for an unknown id.
pub async fn update(
    conn: &mut AsyncPgConnection,
    id: &KeyId,
    name: Option<&str>,
    expires_at: Option<Option<DateTime<Utc>>>,
) -> Result<Option<ManagementKeyRow>, DbError> {
    if let Some(name) = name {
        diesel::update(management_api_keys::table.find(id))
            .set(management_api_keys::name.eq(name))
            .execute(conn)
            .await?;
    }
    if let Some(expires_at) = expires_at {
        diesel::update(management_api_keys::table.find(id))
            .set(management_api_keys::expires_at.eq(expires_at))
            .execute(conn)
            .await?;
    }
    find(conn, id).await
}

/// Marks the key revoked unless it already is; returns the row as it now stands, or `None`
/// for an unknown id. The row is kept for the audit trail.
pub async fn revoke(
    conn: &mut AsyncPgConnection,
    id: &KeyId,
    now: DateTime<Utc>,
) -> Result<Option<ManagementKeyRow>, DbError> {
    diesel::update(
        management_api_keys::table
            .filter(management_api_keys::id.eq(id))
            .filter(management_api_keys::revoked_at.is_null()),
    )
    .set(management_api_keys::revoked_at.eq(now))
    .execute(conn)
    .await?;
    find(conn, id).await
}

/// Records a use, at most once per `granularity`, so that a busy dashboard does not turn
/// every read into a write.
pub async fn touch_last_used(
    conn: &mut AsyncPgConnection,
    id: &KeyId,
    now: DateTime<Utc>,
    granularity: chrono::Duration,
) -> Result<(), DbError> {
    diesel::update(
        management_api_keys::table
            .filter(management_api_keys::id.eq(id))
            .filter(
                management_api_keys::last_used_at
                    .is_null()
                    .or(management_api_keys::last_used_at.lt(now - granularity)),
            ),
    )
    .set(management_api_keys::last_used_at.eq(now))
    .execute(conn)
    .await?;
    Ok(())
}

/// Which of `ids` can no longer be used at `now`: revoked, expired, of a deleted project,
/// or gone.
pub async fn unusable_among(
    conn: &mut AsyncPgConnection,
    ids: &[KeyId],
    now: DateTime<Utc>,
) -> Result<Vec<KeyId>, DbError> {
    let usable: Vec<KeyId> = management_api_keys::table
        .left_join(projects::table)
        .filter(management_api_keys::id.eq_any(ids))
        .filter(management_api_keys::revoked_at.is_null())
        .filter(
            management_api_keys::expires_at
                .is_null()
                .or(management_api_keys::expires_at.gt(now)),
        )
        .filter(projects::deleted_at.is_null())
        .select(management_api_keys::id)
        .load(conn)
        .await?;
    Ok(ids
        .iter()
        .filter(|id| !usable.contains(id))
        .cloned()
        .collect())
}
