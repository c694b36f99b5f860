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

use crate::db::destinations::{self, Switch, Switched};
use crate::db::models::{DestinationRow, EndpointRow};
use crate::db::{Db, DbError};
use crate::model::ids::{DestinationId, EndpointId};
use crate::telemetry::meters;

/// What an operator's pause or resume of an endpoint (`db::endpoints::switch`, in the
/// mutation's own transaction) tells once it committed: its metric and WARN line, if it
/// changed anything.
pub fn switched_endpoint(to: Switch, id: &EndpointId, outcome: &Switched<EndpointRow>) {
    if let Switched::Done(_, held) = outcome {
        announce(to, id, None, *held);
    }
}

/// The same for one destination (`db::destinations::switch`).
pub fn switched_destination(to: Switch, id: &DestinationId, outcome: &Switched<DestinationRow>) {
    if let Switched::Done(row, held) = outcome {
        announce(to, &row.endpoint_id, Some(id), *held);
    }
}

/// Pauses or resumes one destination (the worker: a receiver gone, a run of failed
/// deliveries; an operator).
pub async fn switch_destination(
    db: &Db,
    id: &DestinationId,
    to: Switch,
    now: DateTime<Utc>,
) -> Result<Switched<DestinationRow>, DbError> {
    let outcome = db
        .run(async |conn| destinations::switch(conn, id, to, now).await)
        .await?;
    switched_destination(to, id, &outcome);
    Ok(outcome)
}

/// The metric and the WARN line of a pause or resume that changed something.
fn announce(to: Switch, endpoint: &EndpointId, destination: Option<&DestinationId>, held: i64) {
    let destination = destination.map(DestinationId::as_str);
    match to {
        Switch::Pause(reason) => {
            meters::endpoint_paused(reason);
            tracing::warn!(
                endpoint_id = %endpoint,
                destination_id = destination,
                reason = reason.as_str(),
                "deliveries paused: held, unattempted, until resumed"
            );
        }
        Switch::Resume => {
            meters::endpoint_resumed();
            tracing::warn!(
                endpoint_id = %endpoint,
                destination_id = destination,
                held_deliveries = held,
                "deliveries resumed: the held ones are due again"
            );
        }
    }
}
