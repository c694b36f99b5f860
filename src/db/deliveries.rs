//! Deliveries as the management API reads and changes them: lookups, pages, counts,
//! replays.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{AttemptRow, DeliveryRow, DeliveryRowSql};
use super::schema::webhook_deliveries;
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::{DeliveryId, EndpointId, SubmissionId};
use crate::model::state::DeliveryState;

#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub endpoint_id: Option<EndpointId>,
    pub state: Option<DeliveryState>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
}

pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[DeliveryId],
) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(webhook_deliveries::table
        .filter(webhook_deliveries::id.eq_any(ids))
        .select(DeliveryRow::as_select())
        .load(conn)
        .await?)
}

pub async fn for_submissions(
    conn: &mut AsyncPgConnection,
    submission_ids: &[SubmissionId],
) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(webhook_deliveries::table
        .filter(webhook_deliveries::submission_id.eq_any(submission_ids))
        .select(DeliveryRow::as_select())
        .load(conn)
        .await?)
}

/// Every attempt of the given deliveries, in number order.
pub async fn attempts_for(
    conn: &mut AsyncPgConnection,
    delivery_ids: &[DeliveryId],
) -> Result<Vec<AttemptRow>, DbError> {
    use super::schema::delivery_attempts;
    Ok(delivery_attempts::table
        .filter(delivery_attempts::delivery_id.eq_any(delivery_ids))
        .order((
            delivery_attempts::delivery_id,
            delivery_attempts::attempt_number,
        ))
        .select(AttemptRow::as_select())
        .load(conn)
        .await?)
}

/// Newest first; `after` is the (created_at, id) of the last row of the previous page.
pub async fn page(
    conn: &mut AsyncPgConnection,
    filter: &DeliveryFilter,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
) -> Result<Vec<DeliveryRow>, DbError> {
    let mut query = webhook_deliveries::table
        .select(DeliveryRow::as_select())
        .into_boxed();
    if let Some(endpoint_id) = &filter.endpoint_id {
        query = query.filter(webhook_deliveries::endpoint_id.eq(endpoint_id.clone()));
    }
    if let Some(state) = filter.state {
        query = query.filter(webhook_deliveries::state.eq(state));
    }
    if let Some(after) = filter.created_after {
        query = query.filter(webhook_deliveries::created_at.gt(after));
    }
    if let Some(before) = filter.created_before {
        query = query.filter(webhook_deliveries::created_at.lt(before));
    }
    if let Some((created_at, id)) = after {
        query = query.filter(super::keyset::before(
            webhook_deliveries::created_at,
            webhook_deliveries::id,
            created_at,
            id,
        ));
    }
    Ok(query
        .order((
            webhook_deliveries::created_at.desc(),
            webhook_deliveries::id.desc(),
        ))
        .limit(limit)
        .load(conn)
        .await?)
}

static DELIVERIES_FIRST_PAGES: SqlText = sql!("deliveries_first_pages.sql");
struct DeliveriesFirstPages;

/// The first `limit` deliveries (newest first) of each endpoint, in one statement.
pub async fn first_pages(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[EndpointId],
    limit: i64,
) -> Result<Vec<DeliveryRow>, DbError> {
    Ok(Statement::<DeliveriesFirstPages, DeliveryRowSql, _>::new(
        &DELIVERIES_FIRST_PAGES,
        (
            bind::<diesel::sql_types::Array<Text>, _>(endpoint_ids),
            bind::<BigInt, _>(limit),
        ),
    )
    .load(conn)
    .await?)
}

/// How many deliveries are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Queryable)]
pub struct DeliveryCounts {
    pub pending: i64,
    pub processing: i64,
    pub delivered: i64,
    pub failed: i64,
}

static DELIVERY_COUNTS: SqlText = sql!("delivery_counts.sql");
struct CountDeliveries;

/// The counts of one endpoint's deliveries, or of all (delivery_counts.sql).
pub async fn count_by_state(
    conn: &mut AsyncPgConnection,
    endpoint_id: Option<&EndpointId>,
) -> Result<DeliveryCounts, DbError> {
    Ok(
        Statement::<CountDeliveries, (BigInt, BigInt, BigInt, BigInt), _>::new(
            &DELIVERY_COUNTS,
            (bind::<Nullable<Text>, _>(endpoint_id),),
        )
        .get_result(conn)
        .await?,
    )
}

static DELIVERY_COUNTS_BY_ENDPOINT: SqlText = sql!("delivery_counts_by_endpoint.sql");
struct CountDeliveriesByEndpoint;

/// The counts of each endpoint's deliveries, in one statement (a page of endpoints costs
/// one query, not one per endpoint).
pub async fn count_by_state_for(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[EndpointId],
) -> Result<Vec<(EndpointId, DeliveryCounts)>, DbError> {
    let rows: Vec<(EndpointId, i64, i64, i64, i64)> =
        Statement::<CountDeliveriesByEndpoint, (Text, BigInt, BigInt, BigInt, BigInt), _>::new(
            &DELIVERY_COUNTS_BY_ENDPOINT,
            (bind::<diesel::sql_types::Array<Text>, _>(endpoint_ids),),
        )
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, pending, processing, delivered, failed)| {
            (
                id,
                DeliveryCounts {
                    pending,
                    processing,
                    delivered,
                    failed,
                },
            )
        })
        .collect())
}

static DELIVERY_ACTIVITY: SqlText = sql!("delivery_activity.sql");
struct DeliveryActivity;

/// How many deliveries were delivered and failed in each minute since `since` that had
/// any, oldest first (delivery_activity.sql).
pub async fn activity_by_minute(
    conn: &mut AsyncPgConnection,
    endpoint_id: Option<&EndpointId>,
    since: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, i64, i64)>, DbError> {
    Ok(
        Statement::<DeliveryActivity, (Timestamptz, BigInt, BigInt), _>::new(
            &DELIVERY_ACTIVITY,
            (
                bind::<Nullable<Text>, _>(endpoint_id),
                bind::<Timestamptz, _>(since),
            ),
        )
        .load(conn)
        .await?,
    )
}

/// The queue as `/metrics` reports it.
#[derive(Debug, Clone, Copy)]
pub struct QueueFigures {
    pub counts: DeliveryCounts,
    /// How long the oldest due pending delivery has been due (a paused endpoint's too:
    /// they are owed); 0 when none is.
    pub oldest_due_seconds: f64,
    /// Endpoints whose deliveries are paused.
    pub paused_endpoints: i64,
}

static OLDEST_DUE: SqlText = sql!("oldest_due.sql");
struct OldestDue;

/// The counts of all deliveries and the age of the oldest due one (oldest_due.sql).
pub async fn queue_figures(conn: &mut AsyncPgConnection) -> Result<QueueFigures, DbError> {
    let counts = count_by_state(conn, None).await?;
    let oldest_due_seconds = Statement::<OldestDue, Double, _>::new(&OLDEST_DUE, ())
        .get_result(conn)
        .await?;
    let paused_endpoints = super::schema::endpoints::table
        .filter(super::schema::endpoints::paused_at.is_not_null())
        .count()
        .get_result(conn)
        .await?;
    Ok(QueueFigures {
        counts,
        oldest_due_seconds,
        paused_endpoints,
    })
}

/// What a single replay did.
#[derive(Debug, Clone)]
pub enum ReplayOutcome {
    Replayed(DeliveryRow),
    NotFound,
    /// Not `failed`, or its submission was erased (`submission_erased`), or its endpoint
    /// deleted (`endpoint_deleted`).
    NotReplayable {
        state: DeliveryState,
        submission_erased: bool,
        endpoint_deleted: bool,
    },
    /// Replayable but for where it was to go: retargeted, and its endpoint has no webhook.
    EndpointWithoutWebhook(EndpointId),
}

/// Where a replayed delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayTarget {
    /// Where it was first sent, signed with the secret it was accepted under.
    Snapshot,
    /// The endpoint's webhook URL and secret as they are now.
    Current,
}

impl ReplayTarget {
    fn retarget(self) -> bool {
        self == ReplayTarget::Current
    }
}

static REPLAY_ONE: SqlText = sql!("replay_one.sql", with_events);
struct ReplayOne;

/// Puts a failed delivery back in the queue (replay_one.sql); when it cannot be, says why.
pub async fn replay(
    conn: &mut AsyncPgConnection,
    id: &DeliveryId,
    target: ReplayTarget,
    now: Option<DateTime<Utc>>,
) -> Result<ReplayOutcome, DbError> {
    let replayed: Option<DeliveryRow> = Statement::<ReplayOne, DeliveryRowSql, _>::new(
        &REPLAY_ONE,
        (
            bind::<Text, _>(id),
            bind::<Nullable<Timestamptz>, _>(now),
            bind::<diesel::sql_types::Bool, _>(target.retarget()),
        ),
    )
    .get_result(conn)
    .await
    .optional()?;
    if let Some(row) = replayed {
        return Ok(ReplayOutcome::Replayed(row));
    }
    type Found = (
        DeliveryState,
        Option<SubmissionId>,
        EndpointId,
        Option<DateTime<Utc>>,
        Option<String>,
    );
    let current: Option<Found> = webhook_deliveries::table
        .inner_join(super::schema::endpoints::table)
        .filter(webhook_deliveries::id.eq(id))
        .select((
            webhook_deliveries::state,
            webhook_deliveries::submission_id,
            webhook_deliveries::endpoint_id,
            super::schema::endpoints::deleted_at,
            super::schema::endpoints::webhook_url,
        ))
        .first(conn)
        .await
        .optional()?;
    Ok(match current {
        None => ReplayOutcome::NotFound,
        Some((state, submission_id, endpoint_id, deleted_at, webhook_url)) => {
            let replayable =
                state == DeliveryState::Failed && submission_id.is_some() && deleted_at.is_none();
            if replayable && target.retarget() && webhook_url.is_none() {
                ReplayOutcome::EndpointWithoutWebhook(endpoint_id)
            } else {
                ReplayOutcome::NotReplayable {
                    state,
                    submission_erased: submission_id.is_none(),
                    endpoint_deleted: deleted_at.is_some(),
                }
            }
        }
    })
}

/// Which failed deliveries a bulk replay takes: exclusive bounds on `completed_at` and on
/// `created_at`.
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    pub endpoint_id: Option<EndpointId>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
}

static REPLAYABLE_COUNT: SqlText = sql!("replayable_count.sql");
struct ReplayableCount;

/// How many deliveries [`replay_matching`] would take now (replayable_count.sql).
pub async fn count_replayable(
    conn: &mut AsyncPgConnection,
    filter: &ReplayFilter,
    target: ReplayTarget,
) -> Result<usize, DbError> {
    let count: i64 = Statement::<ReplayableCount, BigInt, _>::new(
        &REPLAYABLE_COUNT,
        (
            bind::<Nullable<Text>, _>(filter.endpoint_id.as_ref()),
            bind::<Nullable<Timestamptz>, _>(filter.failed_after),
            bind::<Nullable<Timestamptz>, _>(filter.failed_before),
            bind::<Nullable<Timestamptz>, _>(filter.created_after),
            bind::<Nullable<Timestamptz>, _>(filter.created_before),
            bind::<diesel::sql_types::Bool, _>(target.retarget()),
        ),
    )
    .get_result(conn)
    .await?;
    Ok(usize::try_from(count).unwrap_or(0))
}

static REPLAY_MATCHING: SqlText = sql!("replay_matching.sql", with_events);
struct ReplayMatching;

/// Replays every failed delivery matching the filter in one statement (replay_matching.sql);
/// returns how many.
pub async fn replay_matching(
    conn: &mut AsyncPgConnection,
    filter: &ReplayFilter,
    target: ReplayTarget,
    now: Option<DateTime<Utc>>,
) -> Result<usize, DbError> {
    let (replayed, _notified): (i64, i64) = Statement::<ReplayMatching, (BigInt, BigInt), _>::new(
        &REPLAY_MATCHING,
        (
            bind::<Nullable<Text>, _>(filter.endpoint_id.as_ref()),
            bind::<Nullable<Timestamptz>, _>(filter.failed_after),
            bind::<Nullable<Timestamptz>, _>(filter.failed_before),
            bind::<Nullable<Timestamptz>, _>(now),
            bind::<Nullable<Timestamptz>, _>(filter.created_after),
            bind::<Nullable<Timestamptz>, _>(filter.created_before),
            bind::<diesel::sql_types::Bool, _>(target.retarget()),
        ),
    )
    .get_result(conn)
    .await?;
    Ok(usize::try_from(replayed).unwrap_or(0))
}
