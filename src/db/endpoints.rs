//! Queries on `endpoints`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::EndpointRow;
use super::schema::endpoints;
use super::DbError;
use crate::model::ids::EndpointId;

pub async fn find(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
) -> Result<Option<EndpointRow>, DbError> {
    Ok(endpoints::table
        .find(id)
        .select(EndpointRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Tells every process's intake that the endpoint changed (listen.rs); inside a
/// transaction it is sent at commit.
async fn notify_changed(conn: &mut AsyncPgConnection, id: &EndpointId) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_notify($1, $2)")
        .bind::<diesel::sql_types::Text, _>(super::listen::ENDPOINT_CHANGED)
        .bind::<diesel::sql_types::Text, _>(id.as_str())
        .execute(conn)
        .await
        .map(|_| ())
}

/// Inserts a new endpoint; `Ok(false)` when its id is taken.
pub async fn insert(conn: &mut AsyncPgConnection, endpoint: &EndpointRow) -> Result<bool, DbError> {
    match diesel::insert_into(endpoints::table)
        .values(endpoint)
        .execute(conn)
        .await
    {
        // A process may hold "no such endpoint" for this id.
        Ok(_) => notify_changed(conn, &endpoint.id)
            .await
            .map(|()| true)
            .map_err(DbError::from),
        Err(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            info,
        )) if info.constraint_name() == Some("endpoints_pkey") => Ok(false),
        Err(error) => Err(error.into()),
    }
}

pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[EndpointId],
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
        query = query.filter(super::keyset::before(
            endpoints::created_at,
            endpoints::id,
            created_at,
            id,
        ));
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
    id: &EndpointId,
    change: F,
) -> Result<Option<EndpointRow>, E>
where
    E: From<diesel::result::Error> + Send + 'static,
    F: FnOnce(EndpointRow) -> Result<EndpointRow, E> + Send + 'static,
{
    use diesel_async::AsyncConnection;
    let id = id.clone();
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
        notify_changed(conn, &id).await?;
        Ok(Some(row))
    })
    .await
}
