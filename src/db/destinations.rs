//! Queries on `destinations`: where an endpoint's submissions are delivered (webhooks and
//! email address lists), each with its own pause state and run of failures.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::endpoint_events::{lock_for_change, notify_changed, write_event};
use super::models::DestinationRow;
use super::schema::{destinations, webhook_deliveries};
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::{DestinationId, EndpointId};
use crate::model::state::{DeliveryState, DestinationKind, EndpointEventKind, PauseReason};

/// The class of the claim's per-destination advisory locks (migrations fair_claiming and
/// destinations).
const CLAIM_LOCK_CLASS: i32 = 1752788324;

/// The destinations of `endpoints` not removed, each endpoint's in order.
pub async fn of_endpoints(
    conn: &mut AsyncPgConnection,
    endpoints: &[EndpointId],
) -> Result<Vec<DestinationRow>, DbError> {
    Ok(destinations::table
        .filter(destinations::endpoint_id.eq_any(endpoints))
        .filter(destinations::removed_at.is_null())
        .order((destinations::endpoint_id, destinations::position))
        .select(DestinationRow::as_select())
        .load(conn)
        .await?)
}

/// Destinations by id, removed ones included.
pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[DestinationId],
) -> Result<Vec<DestinationRow>, DbError> {
    Ok(destinations::table
        .filter(destinations::id.eq_any(ids))
        .select(DestinationRow::as_select())
        .load(conn)
        .await?)
}

/// The endpoint's first webhook destination (not removed), as `Endpoint.webhookUrl` knows
/// it, its row locked for a change of its settings (as [`lock`] locks one), so that a
/// change computed from it overwrites no concurrent one.
pub(super) async fn first_webhook_for_change(
    conn: &mut AsyncPgConnection,
    endpoint: &EndpointId,
) -> QueryResult<Option<DestinationRow>> {
    destinations::table
        .filter(destinations::endpoint_id.eq(endpoint))
        .filter(destinations::kind.eq(DestinationKind::Webhook))
        .filter(destinations::removed_at.is_null())
        .order(destinations::position)
        .select(DestinationRow::as_select())
        .for_no_key_update()
        .first(conn)
        .await
        .optional()
}

/// What adding a destination found and did.
#[derive(Debug)]
pub enum AddOutcome {
    Added(Box<DestinationRow>),
    EndpointNotFound,
    EndpointDeleted,
    /// The endpoint has `limit` destinations already (removed ones not counted).
    LimitReached {
        limit: usize,
    },
}

/// Adds a destination to its endpoint (at the end of its list), unless the endpoint is
/// unknown, deleted, or has `limit` destinations already. The endpoint's row is locked
/// first, so concurrent adds count each other and a concurrent delete either comes first
/// (the add is refused) or after (it sees the new destination). Intake learns of it at
/// commit.
pub async fn add(
    conn: &mut AsyncPgConnection,
    destination: DestinationRow,
    limit: usize,
) -> Result<AddOutcome, DbError> {
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let endpoint_id = destination.endpoint_id.clone();
            let Some(endpoint) = lock_for_change(conn, &endpoint_id).await? else {
                return Ok(AddOutcome::EndpointNotFound);
            };
            if endpoint.deleted_at.is_some() {
                return Ok(AddOutcome::EndpointDeleted);
            }
            let live: i64 = destinations::table
                .filter(destinations::endpoint_id.eq(&endpoint_id))
                .filter(destinations::removed_at.is_null())
                .count()
                .get_result(conn)
                .await?;
            if usize::try_from(live).unwrap_or(usize::MAX) >= limit {
                return Ok(AddOutcome::LimitReached { limit });
            }
            let row = append(conn, destination).await?;
            notify_changed(conn, &endpoint_id).await?;
            Ok(AddOutcome::Added(Box::new(row)))
        })
        .await?)
}

/// Changes a destination's settings in one transaction ([`update_with`]) and tells
/// intake. `Ok(None)` when no destination has the id, or it was removed.
pub async fn change<E, F>(
    conn: &mut AsyncPgConnection,
    id: &DestinationId,
    change: F,
) -> Result<Option<DestinationRow>, E>
where
    E: From<diesel::result::Error> + Send + 'static,
    F: FnOnce(DestinationRow) -> Result<DestinationRow, E> + Send + 'static,
{
    let id = id.clone();
    conn.transaction::<_, E, _>(async move |conn| {
        let changed = update_with(conn, &id, change).await?;
        if let Some(row) = &changed {
            notify_changed(conn, &row.endpoint_id).await?;
        }
        Ok(changed)
    })
    .await
}

/// [`remove`] in a transaction of its own, telling intake.
pub async fn remove_one(
    conn: &mut AsyncPgConnection,
    id: &DestinationId,
    cancel: bool,
    now: DateTime<Utc>,
) -> Result<Option<(DestinationRow, i64)>, DbError> {
    let id = id.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let removed = remove(conn, &id, cancel, now).await?;
            if let Some((row, _)) = &removed {
                notify_changed(conn, &row.endpoint_id).await?;
            }
            Ok(removed)
        })
        .await?)
}

/// Inserts a destination at the end of its endpoint's list (its position is the next
/// free one, removed destinations counted: positions are never reused).
pub async fn append(
    conn: &mut AsyncPgConnection,
    mut destination: DestinationRow,
) -> QueryResult<DestinationRow> {
    let last: Option<i32> = destinations::table
        .filter(destinations::endpoint_id.eq(&destination.endpoint_id))
        .select(diesel::dsl::max(destinations::position))
        .first(conn)
        .await?;
    destination.position = last.map_or(1, |last| last + 1);
    diesel::insert_into(destinations::table)
        .values(&destination)
        .returning(DestinationRow::as_returning())
        .get_result(conn)
        .await
}

/// Locks the destination, lets `change` compute its new settings from the current ones,
/// and writes them, in the caller's transaction. `Ok(None)` when no destination has the
/// id, or it was removed.
pub async fn update_with<E, F>(
    conn: &mut AsyncPgConnection,
    id: &DestinationId,
    change: F,
) -> Result<Option<DestinationRow>, E>
where
    E: From<diesel::result::Error>,
    F: FnOnce(DestinationRow) -> Result<DestinationRow, E>,
{
    let Some(current) = lock(conn, id).await? else {
        return Ok(None);
    };
    if current.removed_at.is_some() {
        return Ok(None);
    }
    let next = change(current)?;
    Ok(Some(
        diesel::update(destinations::table.find(id))
            .set((
                destinations::url.eq(next.url),
                destinations::secret.eq(next.secret),
                destinations::previous_secret.eq(next.previous_secret),
                destinations::previous_secret_expires_at.eq(next.previous_secret_expires_at),
                destinations::recipients.eq(next.recipients),
                destinations::reply_to_field.eq(next.reply_to_field),
                destinations::max_in_flight.eq(next.max_in_flight),
                destinations::events.eq(next.events),
                destinations::max_requests_per_second.eq(next.max_requests_per_second),
                destinations::body_format.eq(next.body_format),
                destinations::body_template.eq(next.body_template),
                destinations::email_template.eq(next.email_template),
                destinations::request_headers.eq(next.request_headers),
                destinations::request_auth.eq(next.request_auth),
                destinations::ed25519_key.eq(next.ed25519_key),
                destinations::retry_policy.eq(next.retry_policy),
                destinations::client_certificate.eq(next.client_certificate),
                destinations::client_key.eq(next.client_key),
                destinations::client_ca.eq(next.client_ca),
                destinations::ordered.eq(next.ordered),
            ))
            .returning(DestinationRow::as_returning())
            .get_result(conn)
            .await?,
    ))
}

/// Reads and locks a destination for a change of its settings or state: a lock that
/// intake's key-share locks do not wait for.
async fn lock(
    conn: &mut AsyncPgConnection,
    id: &DestinationId,
) -> QueryResult<Option<DestinationRow>> {
    destinations::table
        .find(id)
        .select(DestinationRow::as_select())
        .for_no_key_update()
        .first(conn)
        .await
        .optional()
}

static CANCEL_DELIVERIES: SqlText = sql!("cancel_deliveries.sql", with_events);
struct CancelDeliveries;

/// Ends what `endpoint` still owes, to `destination` alone when given, `failed` now (a
/// `cancelled` event each), in the caller's transaction; answers how many.
pub(super) async fn cancel_owed(
    conn: &mut AsyncPgConnection,
    endpoint: &EndpointId,
    destination: Option<&DestinationId>,
    now: DateTime<Utc>,
) -> QueryResult<i64> {
    Statement::<CancelDeliveries, diesel::sql_types::BigInt, _>::new(
        &CANCEL_DELIVERIES,
        (
            bind::<diesel::sql_types::Text, _>(endpoint),
            bind::<diesel::sql_types::Timestamptz, _>(now),
            bind::<diesel::sql_types::Nullable<diesel::sql_types::Text>, _>(destination),
        ),
    )
    .get_result(conn)
    .await
}

/// Removes a destination, keeping its history: new submissions make no delivery for it.
/// What it still owes goes out as it was accepted, unless `cancel`: then it ends `failed`
/// (a `cancelled` event each). In the caller's transaction; answers how many were
/// cancelled, or `None` when no destination has the id (or it was removed before).
pub async fn remove(
    conn: &mut AsyncPgConnection,
    id: &DestinationId,
    cancel: bool,
    now: DateTime<Utc>,
) -> QueryResult<Option<(DestinationRow, i64)>> {
    // FOR UPDATE: intake's key-share locks wait for this removal and then find the
    // destination removed (outbox_insert_batch.sql).
    let current: Option<DestinationRow> = destinations::table
        .find(id)
        .select(DestinationRow::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?;
    let Some(current) = current.filter(|row| row.removed_at.is_none()) else {
        return Ok(None);
    };
    let cancelled = if cancel {
        cancel_owed(conn, &current.endpoint_id, Some(id), now).await?
    } else {
        0
    };
    let row = diesel::update(destinations::table.find(id))
        .set((
            destinations::removed_at.eq(Some(now)),
            destinations::paused_at.eq(None::<DateTime<Utc>>),
            destinations::pause_reason.eq(None::<PauseReason>),
            destinations::previous_secret.eq(None::<String>),
            destinations::previous_secret_expires_at.eq(None::<DateTime<Utc>>),
        ))
        .returning(DestinationRow::as_returning())
        .get_result(conn)
        .await?;
    Ok(Some((row, cancelled)))
}

/// A pause, with its reason, or a resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Pause(PauseReason),
    Resume,
}

/// What a pause or a resume found and did: of one destination, or of every destination of
/// an endpoint (`Row` is then the endpoint's).
#[derive(Debug)]
pub enum Switched<Row> {
    /// Done; a resume says how many held deliveries it made due (a pause, 0).
    Done(Row, i64),
    /// Paused (or running) already: nothing changed (a paused row keeps its time and
    /// reason).
    Already(Row),
    NotFound,
    /// The endpoint is deleted (an endpoint's switch only).
    Deleted,
}

/// Pauses a destination (nothing is claimed for it until it is resumed) or resumes it:
/// its pending deliveries are due now (their counters as they were: no attempt was spent
/// while paused), its run of failures starts again from zero, and the workers are woken.
pub async fn switch(
    conn: &mut AsyncPgConnection,
    id: &DestinationId,
    to: Switch,
    now: DateTime<Utc>,
) -> Result<Switched<DestinationRow>, DbError> {
    let id = id.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let Some(current) = lock(conn, &id).await? else {
                return Ok(Switched::NotFound);
            };
            switch_locked(conn, current, to, now).await
        })
        .await?)
}

/// [`switch`] of a destination already locked by the caller's transaction.
pub(super) async fn switch_locked(
    conn: &mut AsyncPgConnection,
    current: DestinationRow,
    to: Switch,
    now: DateTime<Utc>,
) -> QueryResult<Switched<DestinationRow>> {
    if current.removed_at.is_some() {
        return Ok(Switched::NotFound);
    }
    let paused = current.paused_at.is_some();
    let (paused_at, reason, failures, kind) = match to {
        Switch::Pause(reason) if !paused => (
            Some(now),
            Some(reason),
            current.consecutive_failed_deliveries,
            EndpointEventKind::Paused,
        ),
        Switch::Resume if paused => (None, None, 0, EndpointEventKind::Resumed),
        _ => return Ok(Switched::Already(current)),
    };
    if paused_at.is_some() {
        // A claim taking from this destination right now finishes first; one after the
        // pause commits finds it paused once it holds this lock (claimable_destinations).
        diesel::sql_query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind::<diesel::sql_types::Integer, _>(CLAIM_LOCK_CLASS)
            .bind::<diesel::sql_types::Text, _>(current.id.as_str())
            .execute(conn)
            .await?;
    }
    let id = current.id;
    let row = diesel::update(destinations::table.find(&id))
        .set((
            destinations::paused_at.eq(paused_at),
            destinations::pause_reason.eq(reason),
            destinations::consecutive_failed_deliveries.eq(failures),
        ))
        .returning(DestinationRow::as_returning())
        .get_result(conn)
        .await?;
    write_event(conn, &row.endpoint_id, Some(&id), kind, reason, now).await?;
    if paused_at.is_some() {
        return Ok(Switched::Done(row, 0));
    }
    // Resumed: what it held is due now, and the workers are woken.
    diesel::update(
        webhook_deliveries::table
            .filter(webhook_deliveries::destination_id.eq(&id))
            .filter(webhook_deliveries::state.eq(DeliveryState::Pending))
            .filter(webhook_deliveries::next_attempt_at.gt(now)),
    )
    .set(webhook_deliveries::next_attempt_at.eq(now))
    .execute(conn)
    .await?;
    let held: i64 = webhook_deliveries::table
        .filter(webhook_deliveries::destination_id.eq(&id))
        .filter(
            webhook_deliveries::state.eq_any([DeliveryState::Pending, DeliveryState::Processing]),
        )
        .count()
        .get_result(conn)
        .await?;
    diesel::sql_query("SELECT pg_notify($1, '')")
        .bind::<diesel::sql_types::Text, _>(super::listen::DELIVERY_DUE)
        .execute(conn)
        .await?;
    Ok(Switched::Done(row, held))
}

/// Every destination of `endpoint` not removed, locked, in position order.
pub(super) async fn lock_of_endpoint(
    conn: &mut AsyncPgConnection,
    endpoint: &EndpointId,
) -> QueryResult<Vec<DestinationRow>> {
    destinations::table
        .filter(destinations::endpoint_id.eq(endpoint))
        .filter(destinations::removed_at.is_null())
        // In id order, as count_failed_deliveries.sql locks them: two transactions locking
        // the same destinations never wait on each other in a cycle.
        .order(destinations::id)
        .select(DestinationRow::as_select())
        .for_no_key_update()
        .load(conn)
        .await
}

/// One destination's share of a batch of recorded attempts, for [`count_failed_deliveries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRun {
    pub destination_id: DestinationId,
    /// A delivery was delivered and the run may be nonzero: it starts again.
    pub restarted: bool,
    /// Deliveries that ended failed (after the last delivered one, if `restarted`).
    pub failed: i32,
}

static COUNT_FAILED_DELIVERIES: SqlText = sql!("count_failed_deliveries.sql");
struct CountFailedDeliveries;

/// The thresholds a run of failed deliveries is measured against (0: never).
#[derive(Debug, Clone, Copy)]
pub struct FailureThresholds {
    pub pause: u32,
    pub warn: u32,
}

/// Adds a batch's outcomes to each destination's run of failed deliveries
/// (count_failed_deliveries.sql) and, in the same transaction, writes the `failing` event
/// (and so the operator alert) of each destination whose run crossed the warning
/// threshold with this batch; answers the destinations, not yet paused, whose run has
/// reached the pause threshold.
pub async fn count_failed_deliveries(
    conn: &mut AsyncPgConnection,
    runs: &[FailureRun],
    thresholds: FailureThresholds,
    now: DateTime<Utc>,
) -> Result<Vec<DestinationId>, DbError> {
    use diesel::sql_types::{Array, Bool, Integer, Text};
    let threshold = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let ids: Vec<&str> = runs.iter().map(|run| run.destination_id.as_str()).collect();
    let restarted: Vec<bool> = runs.iter().map(|run| run.restarted).collect();
    let failed: Vec<i32> = runs.iter().map(|run| run.failed).collect();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async |conn| {
            let steps: Vec<(DestinationId, EndpointId, String)> =
                Statement::<CountFailedDeliveries, (Text, Text, Text), _>::new(
                    &COUNT_FAILED_DELIVERIES,
                    (
                        bind::<Array<Text>, _>(&ids),
                        bind::<Array<Bool>, _>(&restarted),
                        bind::<Array<Integer>, _>(&failed),
                        bind::<Integer, _>(threshold(thresholds.pause)),
                        bind::<Integer, _>(threshold(thresholds.warn)),
                    ),
                )
                .load(conn)
                .await?;
            let mut pause = Vec::new();
            for (destination, endpoint, step) in steps {
                if step == "pause" {
                    pause.push(destination);
                } else {
                    write_event(
                        conn,
                        &endpoint,
                        Some(&destination),
                        EndpointEventKind::Failing,
                        None,
                        now,
                    )
                    .await?;
                }
            }
            Ok(pause)
        })
        .await?)
}

/// Deletes up to `limit` autoresponder recipients whose quiet time ended before `now`
/// (migration autoresponders): they decide nothing any more.
pub async fn forget_quiet_recipients(
    conn: &mut AsyncPgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<usize, DbError> {
    use diesel::sql_types::{BigInt, Timestamptz};
    Ok(
        diesel::sql_query(include_str!("sql/forget_quiet_recipients.sql"))
            .bind::<Timestamptz, _>(now)
            .bind::<BigInt, _>(limit)
            .execute(conn)
            .await?,
    )
}
