//! Queries on `endpoints`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::endpoints;
use super::DbError;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = endpoints)]
pub struct EndpointRow {
    pub id: String,
    pub name: String,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
    pub redirect_url: Option<String>,
    /// The column is `text[]` with a CHECK against NULL elements; Diesel's generated type
    /// still admits them, so they are filtered out on read.
    pub allowed_origins: Vec<Option<String>>,
    pub honeypot_field: Option<String>,
}

impl EndpointRow {
    pub fn allowed_origins(&self) -> impl Iterator<Item = &str> {
        self.allowed_origins.iter().flatten().map(String::as_str)
    }

    pub fn has_webhook(&self) -> bool {
        self.webhook_url.is_some()
    }
}

pub async fn find(conn: &mut AsyncPgConnection, id: &str) -> Result<Option<EndpointRow>, DbError> {
    Ok(endpoints::table
        .find(id)
        .select(EndpointRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn insert(conn: &mut AsyncPgConnection, endpoint: &EndpointRow) -> Result<(), DbError> {
    diesel::insert_into(endpoints::table)
        .values(endpoint)
        .execute(conn)
        .await?;
    Ok(())
}

/// Whether an insert failed because the id is taken.
pub fn is_duplicate_id(error: &DbError) -> bool {
    matches!(
        error,
        DbError::Query(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            info,
        )) if info.constraint_name() == Some("endpoints_pkey")
    )
}

pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[String],
) -> Result<Vec<EndpointRow>, DbError> {
    Ok(endpoints::table
        .filter(endpoints::id.eq_any(ids))
        .select(EndpointRow::as_select())
        .load(conn)
        .await?)
}

/// Newest first; `after` is the (created_at, id) of the last row of the previous page.
pub async fn page(
    conn: &mut AsyncPgConnection,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
) -> Result<Vec<EndpointRow>, DbError> {
    let mut query = endpoints::table
        .select(EndpointRow::as_select())
        .into_boxed();
    if let Some((created_at, id)) = after {
        query = query.filter(super::keyset_before("created_at", "id", created_at, id));
    }
    Ok(query
        .order((endpoints::created_at.desc(), endpoints::id.desc()))
        .limit(limit)
        .load(conn)
        .await?)
}

/// Locks the endpoint, lets `change` compute its new state from the current one, and
/// writes it, all in one transaction. `Ok(None)` when no endpoint has the id.
pub async fn update_with<E, F>(
    conn: &mut AsyncPgConnection,
    id: &str,
    change: F,
) -> Result<Option<EndpointRow>, E>
where
    E: From<diesel::result::Error> + Send + 'static,
    F: FnOnce(EndpointRow) -> Result<EndpointRow, E> + Send + 'static,
{
    use diesel_async::AsyncConnection;
    let id = id.to_string();
    conn.transaction::<_, E, _>(async move |conn| {
        let current: Option<EndpointRow> = endpoints::table
            .find(&id)
            .select(EndpointRow::as_select())
            .for_update()
            .first(conn)
            .await
            .optional()?;
        let Some(current) = current else {
            return Ok(None);
        };
        let next = change(current)?;
        let row = diesel::update(endpoints::table.find(&id))
            .set((
                endpoints::name.eq(next.name),
                endpoints::is_active.eq(next.is_active),
                endpoints::webhook_url.eq(next.webhook_url),
                endpoints::webhook_secret.eq(next.webhook_secret),
                endpoints::redirect_url.eq(next.redirect_url),
                endpoints::allowed_origins.eq(next.allowed_origins),
                endpoints::honeypot_field.eq(next.honeypot_field),
            ))
            .returning(EndpointRow::as_returning())
            .get_result(conn)
            .await?;
        Ok(Some(row))
    })
    .await
}
