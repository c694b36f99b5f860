//! Queries on `endpoints`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{EndpointEventRow, EndpointRow};
use super::schema::{endpoint_events, endpoints};
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::EndpointId;
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
/// Deleted endpoints (kept as tombstones) only when asked for.
pub async fn page(
    conn: &mut AsyncPgConnection,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
    include_deleted: bool,
) -> Result<Vec<EndpointRow>, DbError> {
    let mut query = endpoints::table
        .select(EndpointRow::as_select())
        .into_boxed();
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
                endpoints::previous_webhook_secret.eq(next.previous_webhook_secret),
                endpoints::previous_secret_expires_at.eq(next.previous_secret_expires_at),
            ))
            .returning(EndpointRow::as_returning())
            .get_result(conn)
            .await?;
        notify_changed(conn, &id).await?;
        Ok(Some(row))
    })
    .await
}

/// Class and key of the advisory lock every writer of `endpoint_events` holds from its
/// event's id until it commits ("hyme" in ASCII): the events commit in id order, so a
/// reader that has seen an id has seen every smaller one. It is taken last, just before
/// the insert, so it is held only for the insert and the commit, and nobody holding it
/// waits for anything else.
const ENDPOINT_EVENTS_LOCK: (i32, i32) = (1752788325, 0);

/// The class of the claim's per-endpoint advisory locks (migration fair_claiming).
const CLAIM_LOCK_CLASS: i32 = 1752788324;

/// Writes one endpoint event (under the lock) and notifies, in the caller's transaction;
/// the caller commits right after.
async fn write_event(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    kind: EndpointEventKind,
    reason: Option<PauseReason>,
    at: DateTime<Utc>,
) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_advisory_xact_lock($1, $2)")
        .bind::<diesel::sql_types::Integer, _>(ENDPOINT_EVENTS_LOCK.0)
        .bind::<diesel::sql_types::Integer, _>(ENDPOINT_EVENTS_LOCK.1)
        .execute(conn)
        .await?;
    diesel::insert_into(endpoint_events::table)
        .values((
            endpoint_events::endpoint_id.eq(id),
            endpoint_events::kind.eq(kind),
            endpoint_events::reason.eq(reason),
            endpoint_events::occurred_at.eq(at),
        ))
        .execute(conn)
        .await?;
    notify_changed(conn, id).await
}

/// Reads and locks the endpoint for a change of its settings or state (pause, resume):
/// a lock that intake's key-share locks do not wait for.
async fn lock_for_change(
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

/// What a pause found and did.
#[derive(Debug)]
pub enum PauseOutcome {
    Paused(EndpointRow),
    /// Paused already (the row says since when and why); nothing changed.
    AlreadyPaused(EndpointRow),
    NotFound,
    Deleted,
}

/// Pauses an endpoint's deliveries: nothing is claimed for it until it is resumed.
pub async fn pause(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    reason: PauseReason,
    now: DateTime<Utc>,
) -> Result<PauseOutcome, DbError> {
    use diesel_async::AsyncConnection;
    let id = id.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let Some(current) = lock_for_change(conn, &id).await? else {
                return Ok(PauseOutcome::NotFound);
            };
            if current.deleted_at.is_some() {
                return Ok(PauseOutcome::Deleted);
            }
            if current.paused_at.is_some() {
                return Ok(PauseOutcome::AlreadyPaused(current));
            }
            // A claim taking from this endpoint right now finishes first; one after the
            // pause commits finds it paused once it holds this lock (claimable_endpoints).
            diesel::sql_query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
                .bind::<diesel::sql_types::Integer, _>(CLAIM_LOCK_CLASS)
                .bind::<diesel::sql_types::Text, _>(id.as_str())
                .execute(conn)
                .await?;
            let row = diesel::update(endpoints::table.find(&id))
                .set((
                    endpoints::paused_at.eq(Some(now)),
                    endpoints::pause_reason.eq(Some(reason)),
                ))
                .returning(EndpointRow::as_returning())
                .get_result(conn)
                .await?;
            write_event(conn, &id, EndpointEventKind::Paused, Some(reason), now).await?;
            Ok(PauseOutcome::Paused(row))
        })
        .await?)
}

/// What a resume found and did.
#[derive(Debug)]
pub enum ResumeOutcome {
    /// With how many held deliveries were made due.
    Resumed(EndpointRow, i64),
    NotPaused(EndpointRow),
    NotFound,
    Deleted,
}

/// Resumes a paused endpoint: its pending deliveries are due now (their counters as they
/// were: no attempt was spent while paused), its run of failures starts again from zero,
/// and the workers are woken.
pub async fn resume(
    conn: &mut AsyncPgConnection,
    id: &EndpointId,
    now: DateTime<Utc>,
) -> Result<ResumeOutcome, DbError> {
    use super::schema::webhook_deliveries;
    use diesel_async::AsyncConnection;
    let id = id.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let Some(current) = lock_for_change(conn, &id).await? else {
                return Ok(ResumeOutcome::NotFound);
            };
            if current.deleted_at.is_some() {
                return Ok(ResumeOutcome::Deleted);
            }
            if current.paused_at.is_none() {
                return Ok(ResumeOutcome::NotPaused(current));
            }
            let row = diesel::update(endpoints::table.find(&id))
                .set((
                    endpoints::paused_at.eq(None::<DateTime<Utc>>),
                    endpoints::pause_reason.eq(None::<PauseReason>),
                    endpoints::consecutive_failed_deliveries.eq(0),
                ))
                .returning(EndpointRow::as_returning())
                .get_result(conn)
                .await?;
            diesel::update(
                webhook_deliveries::table
                    .filter(webhook_deliveries::endpoint_id.eq(&id))
                    .filter(webhook_deliveries::state.eq(DeliveryState::Pending))
                    .filter(webhook_deliveries::next_attempt_at.gt(now)),
            )
            .set(webhook_deliveries::next_attempt_at.eq(now))
            .execute(conn)
            .await?;
            let held: i64 = webhook_deliveries::table
                .filter(webhook_deliveries::endpoint_id.eq(&id))
                .filter(
                    webhook_deliveries::state
                        .eq_any([DeliveryState::Pending, DeliveryState::Processing]),
                )
                .count()
                .get_result(conn)
                .await?;
            write_event(conn, &id, EndpointEventKind::Resumed, None, now).await?;
            diesel::sql_query("SELECT pg_notify($1, '')")
                .bind::<diesel::sql_types::Text, _>(super::listen::DELIVERY_DUE)
                .execute(conn)
                .await?;
            Ok(ResumeOutcome::Resumed(row, held))
        })
        .await?)
}

/// One endpoint's share of a batch of recorded attempts, for [`count_failed_deliveries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRun {
    pub endpoint_id: EndpointId,
    /// A delivery was delivered and the run may be nonzero: it starts again.
    pub restarted: bool,
    /// Deliveries that ended failed (after the last delivered one, if `restarted`).
    pub failed: i32,
}

static COUNT_FAILED_DELIVERIES: SqlText = sql!("count_failed_deliveries.sql");
struct CountFailedDeliveries;

/// Adds a batch's outcomes to each endpoint's run of failed deliveries
/// (count_failed_deliveries.sql); answers the endpoints, not yet paused, whose run has
/// reached `threshold` (never, when it is 0).
pub async fn count_failed_deliveries(
    conn: &mut AsyncPgConnection,
    runs: &[FailureRun],
    threshold: u32,
) -> Result<Vec<EndpointId>, DbError> {
    use diesel::sql_types::{Array, Bool, Integer, Text};
    Ok(Statement::<CountFailedDeliveries, Text, _>::new(
        &COUNT_FAILED_DELIVERIES,
        (
            bind::<Array<Text>, _>(
                runs.iter()
                    .map(|run| run.endpoint_id.as_str())
                    .collect::<Vec<_>>(),
            ),
            bind::<Array<Bool>, _>(runs.iter().map(|run| run.restarted).collect::<Vec<_>>()),
            bind::<Array<Integer>, _>(runs.iter().map(|run| run.failed).collect::<Vec<_>>()),
            bind::<Integer, _>(i32::try_from(threshold).unwrap_or(i32::MAX)),
        ),
    )
    .load(conn)
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

static CANCEL_DELIVERIES: SqlText = sql!("cancel_deliveries.sql", with_events);
struct CancelDeliveries;

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
    use super::schema::{
        delivery_attempts, delivery_events, delivery_state_counts, submissions, webhook_deliveries,
    };
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
        let cancelled: i64 = if pending + processing > 0 {
            Statement::<CancelDeliveries, diesel::sql_types::BigInt, _>::new(
                &CANCEL_DELIVERIES,
                (
                    bind::<diesel::sql_types::Text, _>(&id),
                    bind::<diesel::sql_types::Timestamptz, _>(now),
                ),
            )
            .get_result(conn)
            .await?
        } else {
            0
        };
        match history {
            History::Keep => {
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
                let deliveries = webhook_deliveries::table
                    .filter(webhook_deliveries::endpoint_id.eq(&id))
                    .select(webhook_deliveries::id);
                diesel::delete(
                    delivery_attempts::table
                        .filter(delivery_attempts::delivery_id.eq_any(deliveries)),
                )
                .execute(conn)
                .await?;
                diesel::delete(delivery_events::table.filter(delivery_events::endpoint_id.eq(&id)))
                    .execute(conn)
                    .await?;
                // The terminal-state triggers write to the counts as rows go.
                diesel::delete(
                    webhook_deliveries::table.filter(webhook_deliveries::endpoint_id.eq(&id)),
                )
                .execute(conn)
                .await?;
                diesel::delete(
                    delivery_state_counts::table.filter(delivery_state_counts::endpoint_id.eq(&id)),
                )
                .execute(conn)
                .await?;
                diesel::delete(submissions::table.filter(submissions::endpoint_id.eq(&id)))
                    .execute(conn)
                    .await?;
                diesel::delete(endpoint_events::table.filter(endpoint_events::endpoint_id.eq(&id)))
                    .execute(conn)
                    .await?;
                diesel::delete(endpoints::table.find(&id))
                    .execute(conn)
                    .await?;
            }
        }
        write_event(conn, &id, EndpointEventKind::Deleted, None, now).await?;
        Ok(DeleteOutcome::Deleted { cancelled })
    })
    .await
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
