//! Deliveries as the management API reads and changes them: lookups, pages, counts,
//! replays.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{AttemptRow, DeliveryRow, DeliveryRowSql};
use super::schema::webhook_deliveries;
use super::statement::{bind, sql, Binds, SqlText, Statement};
use super::DbError;
use crate::model::ids::{DeliveryId, DestinationId, EndpointId, ProjectId, SubmissionId};
use crate::model::state::{DeliveryState, DestinationKind};

#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    /// Only the deliveries of this project's endpoints.
    pub project: Option<ProjectId>,
    pub endpoint_id: Option<EndpointId>,
    pub destination_id: Option<DestinationId>,
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

/// The deliveries of the given submissions, each submission's in its destinations' order
/// (a delivery without one, from before destinations, first).
pub async fn for_submissions(
    conn: &mut AsyncPgConnection,
    submission_ids: &[SubmissionId],
) -> Result<Vec<DeliveryRow>, DbError> {
    use super::schema::destinations;
    Ok(webhook_deliveries::table
        .left_join(destinations::table)
        .filter(webhook_deliveries::submission_id.eq_any(submission_ids))
        .order((
            webhook_deliveries::submission_id,
            destinations::position.nullable().asc().nulls_first(),
            webhook_deliveries::id,
        ))
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
    if let Some(project) = &filter.project {
        query = query
            .filter(webhook_deliveries::endpoint_id.eq_any(super::endpoints::of_project(project)));
    }
    if let Some(destination_id) = &filter.destination_id {
        query = query.filter(webhook_deliveries::destination_id.eq(destination_id.clone()));
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

/// The counts of one endpoint's deliveries, or of all, of one project's endpoints or of
/// every project's (delivery_counts.sql).
pub async fn count_by_state(
    conn: &mut AsyncPgConnection,
    endpoint_id: Option<&EndpointId>,
    project: Option<&ProjectId>,
) -> Result<DeliveryCounts, DbError> {
    Ok(
        Statement::<CountDeliveries, (BigInt, BigInt, BigInt, BigInt), _>::new(
            &DELIVERY_COUNTS,
            (
                bind::<Nullable<Text>, _>(endpoint_id),
                bind::<Nullable<Text>, _>(project),
            ),
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
    project: Option<&ProjectId>,
    since: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, i64, i64)>, DbError> {
    Ok(
        Statement::<DeliveryActivity, (Timestamptz, BigInt, BigInt), _>::new(
            &DELIVERY_ACTIVITY,
            (
                bind::<Nullable<Text>, _>(endpoint_id),
                bind::<Timestamptz, _>(since),
                bind::<Nullable<Text>, _>(project),
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
    let counts = count_by_state(conn, None, None).await?;
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
    /// deleted (`endpoint_deleted`), or it has no destination to go to
    /// (`destination_removed`: retargeted to a destination removed since, or history of an
    /// endpoint that has no webhook destination at all). `webhook_gone`: it was a
    /// webhook's, retargeted, and its endpoint has no webhook destination left (what
    /// `ENDPOINT_HAS_NO_WEBHOOK` has always said).
    NotReplayable {
        state: DeliveryState,
        endpoint_id: EndpointId,
        submission_erased: bool,
        endpoint_deleted: bool,
        destination_removed: bool,
        webhook_gone: bool,
    },
}

/// Where a replayed delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayTarget {
    /// Where it was first sent, signed with the secret it was accepted under.
    Snapshot,
    /// Its destination's URL and secret (or recipients) as they are now.
    Current,
}

impl ReplayTarget {
    fn retarget(self) -> bool {
        self == ReplayTarget::Current
    }
}

static REPLAY_ONE: SqlText = sql!("replay_one.sql", "replay_requeue.sql", "write_events.sql");
struct ReplayOne;

/// Puts a failed delivery back in the queue (replay_one.sql, replay_requeue.sql); when it
/// cannot be, says why.
pub async fn replay(
    conn: &mut AsyncPgConnection,
    id: &DeliveryId,
    target: ReplayTarget,
    now: Option<DateTime<Utc>>,
) -> Result<ReplayOutcome, DbError> {
    let (replayed, _notified): (i64, i64) = Statement::<ReplayOne, (BigInt, BigInt), _>::new(
        &REPLAY_ONE,
        (
            bind::<diesel::sql_types::Bool, _>(target.retarget()),
            bind::<Nullable<Timestamptz>, _>(now),
            bind::<Text, _>(id),
        ),
    )
    .get_result(conn)
    .await?;
    if replayed > 0 {
        if let Some(row) = find_many(conn, std::slice::from_ref(id)).await?.pop() {
            return Ok(ReplayOutcome::Replayed(row));
        }
    }
    type Found = (
        DeliveryState,
        Option<SubmissionId>,
        EndpointId,
        Option<DestinationId>,
        Option<DateTime<Utc>>,
    );
    let current: Option<Found> = webhook_deliveries::table
        .inner_join(super::schema::endpoints::table)
        .filter(webhook_deliveries::id.eq(id))
        .select((
            webhook_deliveries::state,
            webhook_deliveries::submission_id,
            webhook_deliveries::endpoint_id,
            webhook_deliveries::destination_id,
            super::schema::endpoints::deleted_at,
        ))
        .first(conn)
        .await
        .optional()?;
    let Some((state, submission_id, endpoint_id, destination_id, deleted_at)) = current else {
        return Ok(ReplayOutcome::NotFound);
    };
    // Its destination, and whether that one is there to go to.
    let destination = match destination_id {
        Some(id) => super::destinations::find_many(conn, &[id]).await?.pop(),
        None => None,
    };
    let usable = destination
        .as_ref()
        .is_some_and(|d| !target.retarget() || d.removed_at.is_none());
    let was_webhook = destination
        .as_ref()
        .is_none_or(|d| d.kind == DestinationKind::Webhook);
    let webhook_gone = !usable
        && target.retarget()
        && was_webhook
        && !super::destinations::of_endpoints(conn, std::slice::from_ref(&endpoint_id))
            .await?
            .iter()
            .any(|d| d.kind == DestinationKind::Webhook);
    Ok(ReplayOutcome::NotReplayable {
        state,
        endpoint_id,
        submission_erased: submission_id.is_none(),
        endpoint_deleted: deleted_at.is_some(),
        destination_removed: !usable,
        webhook_gone,
    })
}

/// Which failed deliveries a bulk replay takes: exclusive bounds on `completed_at` and on
/// `created_at`.
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    /// Only the deliveries of this project's endpoints.
    pub project: Option<ProjectId>,
    pub endpoint_id: Option<EndpointId>,
    pub destination_id: Option<DestinationId>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
}

impl ReplayFilter {
    /// The binds of replay_filter.sql and what goes on from it, in their order.
    fn binds(&self, target: ReplayTarget, now: Option<DateTime<Utc>>) -> impl Binds + '_ {
        (
            bind::<diesel::sql_types::Bool, _>(target.retarget()),
            bind::<Nullable<Timestamptz>, _>(now),
            bind::<Nullable<Text>, _>(self.endpoint_id.as_ref()),
            bind::<Nullable<Timestamptz>, _>(self.failed_after),
            bind::<Nullable<Timestamptz>, _>(self.failed_before),
            bind::<Nullable<Timestamptz>, _>(self.created_after),
            bind::<Nullable<Timestamptz>, _>(self.created_before),
            bind::<Nullable<Text>, _>(self.destination_id.as_ref()),
            bind::<Nullable<Text>, _>(self.project.as_ref()),
        )
    }
}

static REPLAYABLE_COUNT: SqlText = sql!("replay_filter.sql", "replayable_count.sql");
struct ReplayableCount;

/// How many deliveries [`replay_matching`] would take now (replayable_count.sql).
pub async fn count_replayable(
    conn: &mut AsyncPgConnection,
    filter: &ReplayFilter,
    target: ReplayTarget,
) -> Result<usize, DbError> {
    let count: i64 =
        Statement::<ReplayableCount, BigInt, _>::new(&REPLAYABLE_COUNT, filter.binds(target, None))
            .get_result(conn)
            .await?;
    Ok(usize::try_from(count).unwrap_or(0))
}

static REPLAY_MATCHING: SqlText = sql!(
    "replay_filter.sql",
    "replay_requeue.sql",
    "write_events.sql"
);
struct ReplayMatching;

/// Replays every failed delivery matching the filter in one statement (replay_filter.sql,
/// replay_requeue.sql); returns how many.
pub async fn replay_matching(
    conn: &mut AsyncPgConnection,
    filter: &ReplayFilter,
    target: ReplayTarget,
    now: Option<DateTime<Utc>>,
) -> Result<usize, DbError> {
    let (replayed, _notified): (i64, i64) = Statement::<ReplayMatching, (BigInt, BigInt), _>::new(
        &REPLAY_MATCHING,
        filter.binds(target, now),
    )
    .get_result(conn)
    .await?;
    Ok(usize::try_from(replayed).unwrap_or(0))
}
