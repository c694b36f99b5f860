//! What every change of an endpoint or of one of its destinations goes through: the lock
//! on the endpoint's row, the endpoint event written in the change's transaction, and the
//! notification that tells every process's intake; and the events' reading side.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{EndpointEventRow, EndpointRow};
use super::schema::{endpoint_events, endpoints};
use super::DbError;
use crate::model::ids::{DestinationId, EndpointId};
use crate::model::state::{EndpointEventKind, PauseReason};

/// Tells every process's intake that the endpoint changed (listen.rs); inside a
/// transaction it is sent at commit.
pub(super) async fn notify_changed(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_notify($1, $2)")
        .bind::<diesel::sql_types::Text, _>(super::listen::ENDPOINT_CHANGED)
        .bind::<diesel::sql_types::Text, _>(id.as_str())
        .execute(conn)
        .await
        .map(|_| ())
}

/// Reads and locks the endpoint for a change of its settings or state (pause, resume):
/// a lock that intake's key-share locks do not wait for.
pub(super) async fn lock_for_change(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
) -> QueryResult<Option<EndpointRow>> {
    endpoints::table
        .find(id)
        .select(EndpointRow::as_select())
        .for_no_key_update()
        .first(conn)
        .await
        .optional()
}

/// Class and key of the advisory lock every writer of `endpoint_events` holds from its
/// event's id until it commits ("hyme" in ASCII): the events commit in id order, so a
/// reader that has seen an id has seen every smaller one. It is taken last, just before
/// the insert, so it is held only for the insert and the commit, and nobody holding it
/// waits for anything else.
const ENDPOINT_EVENTS_LOCK: (i32, i32) = (1752788325, 0);

/// Writes one endpoint event (under the lock) and notifies, in the caller's transaction;
/// the caller commits right after. `destination`: the destination a pause or resume was
/// of.
pub(super) async fn write_event(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    destination: Option<&DestinationId>,
    kind: EndpointEventKind,
    reason: Option<PauseReason>,
    at: DateTime<Utc>,
) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_advisory_xact_lock($1, $2)")
        .bind::<diesel::sql_types::Integer, _>(ENDPOINT_EVENTS_LOCK.0)
        .bind::<diesel::sql_types::Integer, _>(ENDPOINT_EVENTS_LOCK.1)
        .execute(conn)
        .await?;
    let event_id: i64 = diesel::insert_into(endpoint_events::table)
        .values((
            endpoint_events::endpoint_id.eq(id),
            endpoint_events::kind.eq(kind),
            endpoint_events::reason.eq(reason),
            endpoint_events::occurred_at.eq(at),
            endpoint_events::destination_id.eq(destination),
        ))
        .returning(endpoint_events::id)
        .get_result(conn)
        .await?;
    if let Some(destination) = destination {
        super::alerts::owe(conn, event_id, id, destination, kind, reason, at).await?;
    }
    notify_changed(conn, id).await
}

/// Endpoint events after `after`, oldest first, at most `limit`; only `endpoint`'s when
/// given.
pub async fn events_after(
    conn: &mut AsyncPgConnection,
    after: i64,
    endpoint: Option<&EndpointId>,
    limit: i64,
) -> Result<Vec<EndpointEventRow>, DbError> {
    let mut query = endpoint_events::table
        .filter(endpoint_events::id.gt(after))
        .select(EndpointEventRow::as_select())
        .into_boxed();
    if let Some(endpoint) = endpoint {
        query = query.filter(endpoint_events::endpoint_id.eq(endpoint));
    }
    Ok(query
        .order(endpoint_events::id)
        .limit(limit)
        .load(conn)
        .await?)
}

/// The newest endpoint event's id (0 when there is none).
pub async fn newest_event_id(conn: &mut AsyncPgConnection) -> Result<i64, DbError> {
    Ok(endpoint_events::table
        .select(diesel::dsl::max(endpoint_events::id))
        .first::<Option<i64>>(conn)
        .await?
        .unwrap_or(0))
}
