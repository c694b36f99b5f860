//! Queries on `audit_entries`: the record of every change made through the management
//! API, written in the change's own transaction.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::listen::AUDIT_ENTRY;
use super::schema::audit_entries;
use super::DbError;
use crate::model::ids::ProjectId;

/// What an entry records.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = audit_entries)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct AuditRecord {
    pub at: DateTime<Utc>,
    pub key_id: String,
    pub key_name: String,
    pub project_id: Option<ProjectId>,
    pub operation: String,
    /// The ids the change was about (an endpoint, a destination, submissions…).
    pub targets: Vec<Option<String>>,
    /// The operation's arguments, secrets and personal values replaced by `"[redacted]"`.
    pub changes: serde_json::Value,
    pub address_digest: Option<String>,
}

/// One entry as it is stored and shown.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = audit_entries)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct AuditRow {
    pub id: i64,
    #[diesel(embed)]
    pub record: AuditRecord,
}

/// Writes the entry and tells every process's subscribers of it once the transaction
/// commits (a notification is sent at commit, or never).
pub async fn insert(conn: &mut AsyncPgConnection, entry: &AuditRecord) -> Result<i64, DbError> {
    let id: i64 = diesel::insert_into(audit_entries::table)
        .values(entry)
        .returning(audit_entries::id)
        .get_result(conn)
        .await?;
    diesel::sql_query("SELECT pg_notify($1, $2)")
        .bind::<diesel::sql_types::Text, _>(AUDIT_ENTRY)
        .bind::<diesel::sql_types::Text, _>(id.to_string())
        .execute(conn)
        .await?;
    Ok(id)
}

/// Newest first, before the entry `before` (exclusive), of one project or of all.
pub async fn page(
    conn: &mut AsyncPgConnection,
    project: Option<&ProjectId>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRow>, DbError> {
    let mut query = audit_entries::table
        .select(AuditRow::as_select())
        .into_boxed();
    if let Some(project) = project {
        query = query.filter(audit_entries::project_id.eq(project.clone()));
    }
    if let Some(before) = before {
        query = query.filter(audit_entries::id.lt(before));
    }
    Ok(query
        .order(audit_entries::id.desc())
        .limit(limit)
        .load(conn)
        .await?)
}

pub async fn find(conn: &mut AsyncPgConnection, id: i64) -> Result<Option<AuditRow>, DbError> {
    Ok(audit_entries::table
        .find(id)
        .select(AuditRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Deletes up to `batch` entries older than `cutoff`; returns how many.
pub async fn delete_older_than(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
    batch: i64,
) -> Result<usize, DbError> {
    let ids: Vec<i64> = audit_entries::table
        .filter(audit_entries::at.lt(cutoff))
        .select(audit_entries::id)
        .order(audit_entries::id)
        .limit(batch)
        .load(conn)
        .await?;
    Ok(
        diesel::delete(audit_entries::table.filter(audit_entries::id.eq_any(ids)))
            .execute(conn)
            .await?,
    )
}
