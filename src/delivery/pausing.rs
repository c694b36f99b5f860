//! Pausing and resuming deliveries, of one destination (the worker: a receiver gone, a run
//! of failed deliveries; an operator) or of every destination of an endpoint (an
//! operator): the change (db/destinations.rs, db/endpoints.rs, with its endpoint events),
//! its metric and its WARN line, in one place.
//!
//! While paused, intake still accepts and queues; nothing is claimed for the endpoint, so
//! no attempt is spent. Requests already claimed when the pause commits finish and are
//! recorded. A resume makes the held deliveries due at once with their counters as they
//! were.

use chrono::{DateTime, Utc};

use crate::db::endpoints::{self, PauseOutcome, ResumeOutcome};
use crate::db::{destinations, Db, DbError};
use crate::model::ids::{DestinationId, EndpointId};
use crate::model::state::PauseReason;
use crate::telemetry::meters;

pub async fn pause(
    db: &Db,
    id: &EndpointId,
    reason: PauseReason,
    now: DateTime<Utc>,
) -> Result<PauseOutcome, DbError> {
    let outcome = db
        .run(async |conn| endpoints::pause(conn, id, reason, now).await)
        .await?;
    if let PauseOutcome::Paused(_) = &outcome {
        meters::endpoint_paused(reason);
        tracing::warn!(
            endpoint_id = %id,
            reason = reason.as_str(),
            "endpoint paused: its deliveries are held, unattempted, until it is resumed"
        );
    }
    Ok(outcome)
}

pub async fn resume(
    db: &Db,
    id: &EndpointId,
    now: DateTime<Utc>,
) -> Result<ResumeOutcome, DbError> {
    let outcome = db
        .run(async |conn| endpoints::resume(conn, id, now).await)
        .await?;
    if let ResumeOutcome::Resumed(_, held) = &outcome {
        meters::endpoint_resumed();
        tracing::warn!(
            endpoint_id = %id,
            held_deliveries = held,
            "endpoint resumed: its held deliveries are due again"
        );
    }
    Ok(outcome)
}

pub async fn pause_destination(
    db: &Db,
    id: &DestinationId,
    reason: PauseReason,
    now: DateTime<Utc>,
) -> Result<destinations::PauseOutcome, DbError> {
    let outcome = db
        .run(async |conn| destinations::pause(conn, id, reason, now).await)
        .await?;
    if let destinations::PauseOutcome::Paused(row) = &outcome {
        meters::endpoint_paused(reason);
        tracing::warn!(
            endpoint_id = %row.endpoint_id,
            destination_id = %id,
            reason = reason.as_str(),
            "destination paused: its deliveries are held, unattempted, until it is resumed"
        );
    }
    Ok(outcome)
}

pub async fn resume_destination(
    db: &Db,
    id: &DestinationId,
    now: DateTime<Utc>,
) -> Result<destinations::ResumeOutcome, DbError> {
    let outcome = db
        .run(async |conn| destinations::resume(conn, id, now).await)
        .await?;
    if let destinations::ResumeOutcome::Resumed(row, held) = &outcome {
        meters::endpoint_resumed();
        tracing::warn!(
            endpoint_id = %row.endpoint_id,
            destination_id = %id,
            held_deliveries = held,
            "destination resumed: its held deliveries are due again"
        );
    }
    Ok(outcome)
}
