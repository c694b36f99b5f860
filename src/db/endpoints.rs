//! Queries on `endpoints`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::destinations::{Switch, Switched};
use super::endpoint_events::{lock_for_change, notify_changed, write_event};
use super::models::{DestinationRow, EndpointRow};
use super::schema::{destinations, endpoints};
use super::DbError;
use crate::model::ids::{EndpointId, ProjectId};
use crate::model::state::{DeliveryState, EndpointEventKind, PauseReason};

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

/// The endpoint, and whether it has a destination not removed (for intake's cache).
pub async fn find_for_intake(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
) -> Result<Option<(EndpointRow, bool)>, DbError> {
    let has_destinations = diesel::dsl::exists(
        destinations::table
            .filter(destinations::endpoint_id.eq(id))
            .filter(destinations::removed_at.is_null()),
    );
    Ok(endpoints::table
        .find(id)
        .select((EndpointRow::as_select(), has_destinations))
        .first(conn)
        .await
        .optional()?)
}

/// Inserts a new endpoint with its webhook destination, if it has one, in one
/// transaction; `Ok(false)` when its id is taken.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    endpoint: &EndpointRow,
    webhook: Option<DestinationRow>,
) -> Result<bool, DbError> {
    use diesel_async::AsyncConnection;
    let endpoint = endpoint.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            // A taken id inserts nothing (rather than failing, which would abort the
            // transaction).
            let inserted = diesel::insert_into(endpoints::table)
                .values(&endpoint)
                .on_conflict(endpoints::id)
                .do_nothing()
                .execute(conn)
                .await?;
            if inserted == 0 {
                return Ok(false);
            }
            if let Some(webhook) = webhook {
                super::destinations::append(conn, webhook).await?;
            }
            // A process may hold "no such endpoint" for this id.
            notify_changed(conn, &endpoint.id).await?;
            Ok(true)
        })
        .await?)
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
/// Deleted endpoints (kept as tombstones) only when asked for.
/// The ids of a project's endpoints, as a subquery (`endpoint_id IN (…)`).
pub fn of_project<'a>(
    project: &ProjectId,
) -> endpoints::BoxedQuery<'a, diesel::pg::Pg, diesel::sql_types::Text> {
    endpoints::table
        .filter(endpoints::project_id.eq(project.clone()))
        .select(endpoints::id)
        .into_boxed()
}

/// Newest first, of one project or of every project.
pub async fn page(
    conn: &mut AsyncPgConnection,
    project: Option<&ProjectId>,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
    include_deleted: bool,
) -> Result<Vec<EndpointRow>, DbError> {
    let mut query = endpoints::table
        .select(EndpointRow::as_select())
        .into_boxed();
    if let Some(project) = project {
        query = query.filter(endpoints::project_id.eq(project.clone()));
    }
    if !include_deleted {
        query = query.filter(endpoints::deleted_at.is_null());
    }
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

/// Locks the endpoint and its first webhook destination (what `Endpoint.webhookUrl`
/// reads and writes), lets `change` compute their new state from the current one, and
/// writes it, all in one transaction: the endpoint's settings; the webhook updated in
/// place, added (after the endpoint's other destinations) or removed (what it still owes
/// goes out as accepted). `Ok(None)` when no endpoint has the id.
pub async fn update_with<E, F>(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    now: DateTime<Utc>,
    change: F,
) -> Result<Option<(EndpointRow, Option<DestinationRow>)>, E>
where
    E: From<diesel::result::Error> + Send + 'static,
    F: FnOnce(
            EndpointRow,
            Option<DestinationRow>,
        ) -> Result<(EndpointRow, Option<DestinationRow>), E>
        + Send
        + 'static,
{
    use diesel_async::AsyncConnection;
    let id = id.clone();
    conn.transaction::<_, E, _>(async move |conn| {
        // A lock that leaves intake's key-share locks alone: settings are not the key.
        let current: Option<EndpointRow> = endpoints::table
            .find(&id)
            .select(EndpointRow::as_select())
            .for_no_key_update()
            .first(conn)
            .await
            .optional()?;
        let Some(current) = current else {
            return Ok(None);
        };
        let webhook = super::destinations::first_webhook_for_change(conn, &id).await?;
        let (next, next_webhook) = change(current, webhook.clone())?;
        let row = diesel::update(endpoints::table.find(&id))
            .set((
                endpoints::name.eq(next.name),
                endpoints::is_active.eq(next.is_active),
                endpoints::redirect_url.eq(next.redirect_url),
                endpoints::allowed_origins.eq(next.allowed_origins),
                endpoints::honeypot_field.eq(next.honeypot_field),
                endpoints::file_uploads.eq(next.file_uploads),
                endpoints::retention_days.eq(next.retention_days),
                endpoints::spam_retention_days.eq(next.spam_retention_days),
            ))
            .returning(EndpointRow::as_returning())
            .get_result(conn)
            .await?;
        let written = match (webhook, next_webhook) {
            (None, None) => None,
            (Some(old), None) => {
                super::destinations::remove(conn, &old.id, false, now).await?;
                None
            }
            (None, Some(new)) => Some(super::destinations::append(conn, new).await?),
            (Some(old), Some(new)) => {
                super::destinations::update_with::<diesel::result::Error, _>(conn, &old.id, |_| {
                    Ok(new)
                })
                .await?
            }
        };
        notify_changed(conn, &id).await?;
        Ok(Some((row, written)))
    })
    .await
}

/// Pauses every destination of an endpoint (each with its event: nothing is claimed for
/// the endpoint until it is resumed), or resumes every paused one (db/destinations.rs
/// `switch`). `Done` when any destination changed, with the held deliveries of all.
pub async fn switch(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    to: Switch,
    now: DateTime<Utc>,
) -> Result<Switched<EndpointRow>, DbError> {
    use diesel_async::AsyncConnection;
    let id = id.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let Some(current) = lock_for_change(conn, &id).await? else {
                return Ok(Switched::NotFound);
            };
            if current.deleted_at.is_some() {
                return Ok(Switched::Deleted);
            }
            let mut made_due = None;
            for destination in super::destinations::lock_of_endpoint(conn, &id).await? {
                if let Switched::Done(_, held) =
                    super::destinations::switch_locked(conn, destination, to, now).await?
                {
                    made_due = Some(made_due.unwrap_or(0) + held);
                }
            }
            Ok(match made_due {
                Some(held) => Switched::Done(current, held),
                None => Switched::Already(current),
            })
        })
        .await?)
}

/// What deleting found and did.
#[derive(Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Deleted; how many owed deliveries were cancelled.
    Deleted {
        cancelled: i64,
    },
    NotFound,
    /// Deleted before with its history kept, and asked to keep it again.
    AlreadyDeleted,
    /// Deliveries still owed and no cancelling asked for.
    InProgress {
        pending: i64,
        processing: i64,
    },
}

/// What happens to a deleted endpoint's submissions, deliveries and their histories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Everything stays, readable through the API; the endpoint stays as a tombstone, so
    /// its id cannot be taken by a new endpoint.
    Keep,
    /// Submissions, deliveries, attempts and events go with the endpoint; its id is free.
    Erase,
}

/// Deletes an endpoint, in one transaction. Refused while deliveries are pending or
/// processing unless `cancel`: then they end `failed` (a `cancelled` event each; a worker
/// still sending records its attempt as a late one, or finds it erased). A tombstone kept
/// before can be erased later.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    cancel: bool,
    history: History,
    now: DateTime<Utc>,
) -> Result<DeleteOutcome, DbError> {
    // The cancel takes delivery row locks while the endpoint row is held, and a recorder
    // may hold one of them while its state-count trigger waits for a key-share lock on
    // that row: PostgreSQL breaks such a deadlock by failing one side, and when that is
    // this transaction it runs again.
    let mut tries = 0;
    loop {
        tries += 1;
        match delete_once(conn, id, cancel, history, now).await {
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::Unknown,
                info,
            )) if tries < 3 && info.message().contains("deadlock") => continue,
            outcome => return Ok(outcome?),
        }
    }
}

async fn delete_once(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    cancel: bool,
    history: History,
    now: DateTime<Utc>,
) -> QueryResult<DeleteOutcome> {
    use super::schema::webhook_deliveries;
    use diesel_async::AsyncConnection;
    let id = id.clone();
    conn.transaction::<_, diesel::result::Error, _>(async move |conn| {
        // FOR UPDATE: intake's and replays' key-share locks wait for this delete, and
        // then find the endpoint deleted (outbox_insert_batch.sql, replay_*.sql).
        let current: Option<EndpointRow> = endpoints::table
            .find(&id)
            .select(EndpointRow::as_select())
            .for_update()
            .first(conn)
            .await
            .optional()?;
        let Some(current) = current else {
            return Ok(DeleteOutcome::NotFound);
        };
        if current.deleted_at.is_some() && history == History::Keep {
            return Ok(DeleteOutcome::AlreadyDeleted);
        }
        let owed: Vec<(DeliveryState, i64)> = webhook_deliveries::table
            .filter(webhook_deliveries::endpoint_id.eq(&id))
            .filter(
                webhook_deliveries::state
                    .eq_any([DeliveryState::Pending, DeliveryState::Processing]),
            )
            .group_by(webhook_deliveries::state)
            .select((webhook_deliveries::state, diesel::dsl::count_star()))
            .load(conn)
            .await?;
        let count_of = |state: DeliveryState| {
            owed.iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |(_, n)| *n)
        };
        let (pending, processing) = (
            count_of(DeliveryState::Pending),
            count_of(DeliveryState::Processing),
        );
        if pending + processing > 0 && !cancel {
            return Ok(DeleteOutcome::InProgress {
                pending,
                processing,
            });
        }
        let cancelled = if pending + processing > 0 {
            super::destinations::cancel_owed(conn, &id, None, now).await?
        } else {
            0
        };
        match history {
            History::Keep => {
                // Each removed as removeDestination removes it, history kept.
                let kept: Vec<crate::model::ids::DestinationId> = destinations::table
                    .filter(destinations::endpoint_id.eq(&id))
                    .filter(destinations::removed_at.is_null())
                    .select(destinations::id)
                    .load(conn)
                    .await?;
                for destination in &kept {
                    super::destinations::remove(conn, destination, false, now).await?;
                }
                // The columns of the release before destinations, cleared as the
                // tombstone check asks.
                diesel::update(endpoints::table.find(&id))
                    .set((
                        endpoints::deleted_at.eq(Some(now)),
                        endpoints::is_active.eq(false),
                        endpoints::webhook_url.eq(None::<String>),
                        endpoints::webhook_secret.eq(None::<String>),
                        endpoints::previous_webhook_secret.eq(None::<String>),
                        endpoints::previous_secret_expires_at.eq(None::<DateTime<Utc>>),
                        endpoints::paused_at.eq(None::<DateTime<Utc>>),
                        endpoints::pause_reason.eq(None::<PauseReason>),
                        endpoints::consecutive_failed_deliveries.eq(0),
                    ))
                    .execute(conn)
                    .await?;
            }
            History::Erase => {
                // Everything of it, children first (migration erase_endpoint).
                diesel::sql_query("SELECT erase_endpoint($1)")
                    .bind::<diesel::sql_types::Text, _>(&id)
                    .execute(conn)
                    .await?;
            }
        }
        write_event(conn, &id, None, EndpointEventKind::Deleted, None, now).await?;
        Ok(DeleteOutcome::Deleted { cancelled })
    })
    .await
}
