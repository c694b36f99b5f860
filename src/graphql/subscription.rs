//! `Subscription.deliveryStateChanged` over the process's event feed.

use async_graphql::{Context, Object, Subscription, ID};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use futures_util::{Stream, StreamExt};

use super::error::{ResolverError, Result};
use super::types::{AttemptOutcome, Delivery, DeliveryState, EndpointEvent, Timestamp};
use super::visibility::view;
use super::{app, database};
use crate::db::events::EventFilter;
use crate::db::models::EventRow;
use crate::db::projects::Owned;
use crate::db::{self, Db, DbError};
use crate::error::ApiError;
use crate::model::ids::ProjectId;
use crate::model::ids::{DeliveryId, DestinationId, EndpointId};
use crate::model::state::EventKind;
use futures_util::future::Either;
use std::collections::HashMap;

#[derive(Default)]
pub struct SubscriptionRoot;

#[Subscription]
impl SubscriptionRoot {
    /// Every committed state change of a delivery, in commit order per delivery and in
    /// `id` order overall, each once. With `afterEventId` (the `id` of the last event
    /// received), the events committed since are replayed first, then live ones follow
    /// with no gap and no duplicate; an `afterEventId` older than the event retention
    /// window is refused with `EVENT_HISTORY_EXPIRED`. Filters combine with AND; an
    /// empty `states` list matches nothing. `destinationId`: one destination's deliveries.
    async fn delivery_state_changed(
        &self,
        ctx: &Context<'_>,
        endpoint_id: Option<ID>,
        delivery_id: Option<ID>,
        destination_id: Option<ID>,
        states: Option<Vec<DeliveryState>>,
        after_event_id: Option<ID>,
    ) -> Result<impl Stream<Item = async_graphql::Result<DeliveryEvent>>> {
        let after = after_event_id
            .map(|id| parse_event_id(&id))
            .transpose()?
            .or_else(|| ctx.data_opt::<ResumeAfter>().map(|resume| resume.0));
        // An id that cannot name anything matches nothing, like one no delivery has.
        let filter = match (
            super::scope(endpoint_id.as_ref(), EndpointId::parse),
            super::scope(delivery_id.as_ref(), DeliveryId::parse),
            super::scope(destination_id.as_ref(), DestinationId::parse),
        ) {
            (Some(endpoint_id), Some(delivery_id), Some(destination_id)) => EventFilter {
                endpoint_id,
                delivery_id,
                destination_id,
                states,
            },
            _ => EventFilter::nothing(),
        };
        let app = app(ctx);
        let cursor = ctx.data_opt::<Arc<EventCursor>>().cloned();
        let started = {
            let cursor = cursor.clone();
            move |after: i64| {
                if let Some(cursor) = cursor {
                    cursor.started_after.store(after, Ordering::SeqCst);
                    cursor.current.store(after, Ordering::SeqCst);
                }
            }
        };
        // Its catch-up reads (a resume, a lag) are GraphQL's, from GraphQL's share.
        let events = app
            .events
            .subscribe(database(ctx).clone(), filter, after, started);
        let events = match view(ctx) {
            None => Either::Left(events),
            Some(view) => {
                let seen = Arc::new(SeenDestinations::new(database(ctx).clone(), view.clone()));
                Either::Right(events.filter_map(move |event| {
                    let seen = seen.clone();
                    async move {
                        match event {
                            Ok(event) => match seen.sees(&event).await {
                                Ok(true) => Some(Ok(event)),
                                Ok(false) => None,
                                Err(error) => Some(Err(error.into())),
                            },
                            Err(error) => Some(Err(error)),
                        }
                    }
                }))
            }
        };
        Ok(events.map(move |event| {
            if let (Ok(event), Some(cursor)) = (&event, &cursor) {
                cursor.current.store(event.id, Ordering::SeqCst);
            }
            event
                .map(DeliveryEvent)
                .map_err(|error| ResolverError::from(error).into())
        }))
    }

    /// Every committed change of an endpoint's state: `PAUSED` (with its reason),
    /// `RESUMED`, `DELETED`, in `id` order, each once (their ids are their own sequence,
    /// not delivery events'). With `afterEventId` the changes committed since that one are
    /// sent first. For one endpoint with `endpointId`.
    async fn endpoint_state_changed(
        &self,
        ctx: &Context<'_>,
        endpoint_id: Option<ID>,
        after_event_id: Option<ID>,
    ) -> Result<impl Stream<Item = async_graphql::Result<EndpointEvent>>> {
        let after = after_event_id.map(|id| parse_event_id(&id)).transpose()?;
        // An id no endpoint can have is refused, as by every endpoint mutation.
        let endpoint = match endpoint_id {
            None => None,
            Some(id) => Some(EndpointId::parse(&id).ok_or(ApiError::EndpointNotFound {
                endpoint_id: id.0.clone(),
            }))
            .transpose()?,
        };
        let app = app(ctx);
        let db = database(ctx).clone();
        let view = view(ctx).cloned();
        Ok(app
            .events
            .subscribe_endpoint_events(database(ctx).clone(), endpoint, after)
            // Endpoint events are few (pauses, resumes, deletions): each is checked.
            .filter_map(move |event| {
                let (db, view) = (db.clone(), view.clone());
                async move {
                    let Some(view) = view else {
                        return Some(event);
                    };
                    let row = match event {
                        Ok(row) => row,
                        Err(error) => return Some(Err(error)),
                    };
                    let owner = db
                        .run(async |conn| {
                            db::projects::owner_of(conn, Owned::Endpoint(&row.endpoint_id)).await
                        })
                        .await;
                    match owner {
                        Ok(owner) => (owner.as_ref() == Some(&view)).then_some(Ok(row)),
                        Err(error) => Some(Err(error.into())),
                    }
                }
            })
            .map(|event| {
                event
                    .map(EndpointEvent)
                    .map_err(|error| ResolverError::from(error).into())
            }))
    }
}

/// Which destinations' events a subscriber of one project sees. A destination id is never
/// reused and a destination never changes endpoint, nor an endpoint project, so each
/// answer holds for the subscription's life: one query per destination, not per event.
struct SeenDestinations {
    db: Db,
    view: ProjectId,
    known: std::sync::Mutex<HashMap<DestinationId, bool>>,
}

impl SeenDestinations {
    fn new(db: Db, view: ProjectId) -> SeenDestinations {
        SeenDestinations {
            db,
            view,
            known: std::sync::Mutex::new(HashMap::new()),
        }
    }

    async fn sees(&self, event: &EventRow) -> Result<bool, DbError> {
        let Some(destination) = &event.delivery.destination_id else {
            // A delivery from before destinations: its endpoint's project, each time.
            let endpoint = &event.endpoint_id;
            let owner = self
                .db
                .run(async |conn| db::projects::owner_of(conn, Owned::Endpoint(endpoint)).await)
                .await?;
            return Ok(owner.as_ref() == Some(&self.view));
        };
        if let Some(known) = self.lock().get(destination) {
            return Ok(*known);
        }
        let owner = self
            .db
            .run(async |conn| db::projects::owner_of(conn, Owned::Destination(destination)).await)
            .await?;
        let seen = owner.as_ref() == Some(&self.view);
        self.lock().insert(destination.clone(), seen);
        Ok(seen)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<DestinationId, bool>> {
        // A map of plain values: a panic while holding the lock cannot tear it.
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Request data (as `Arc<EventCursor>`): where the execution has got to, for the
/// WebSocket layer. Both are -1 until the stream has started.
#[derive(Debug)]
pub struct EventCursor {
    /// The id the stream started after.
    pub started_after: AtomicI64,
    /// That id, then the id of each event as it is resolved.
    pub current: AtomicI64,
}

impl Default for EventCursor {
    fn default() -> Self {
        EventCursor {
            started_after: AtomicI64::new(-1),
            current: AtomicI64::new(-1),
        }
    }
}

/// Request data: start after this event when the document gives no `afterEventId` (a
/// subscriber resuming on its own after falling behind its group).
pub struct ResumeAfter(pub i64);

/// Event ids are decimal integers that grow with every event.
fn parse_event_id(id: &ID) -> Result<i64, ApiError> {
    id.parse::<i64>()
        .ok()
        .filter(|id| *id >= 0)
        .ok_or_else(|| ApiError::InvalidInput {
            field: "afterEventId".into(),
            reason: "must be the id of an event: a whole number".into(),
        })
}

/// One committed change of a delivery. The counters and states are those the change
/// left; `delivery` is the delivery as it was when the event was read for sending (the
/// same or a later state).
pub struct DeliveryEvent(pub EventRow);

#[Object]
impl DeliveryEvent {
    /// Ordered: a later event has a larger id. Pass the last one received as
    /// `afterEventId` to resume.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn delivery(&self) -> Delivery {
        Delivery(self.0.delivery.clone())
    }
    async fn endpoint_id(&self) -> ID {
        ID(self.0.endpoint_id.to_string())
    }
    async fn kind(&self) -> EventKind {
        self.0.kind
    }
    async fn state(&self) -> DeliveryState {
        self.0.state
    }
    /// Null for `CREATED`.
    async fn previous_state(&self) -> Option<DeliveryState> {
        self.0.previous_state
    }
    async fn attempts(&self) -> i32 {
        self.0.attempts
    }
    async fn cycle_attempts(&self) -> i32 {
        self.0.cycle_attempts
    }
    /// The recorded attempt's outcome, for `ATTEMPT_RECORDED` and `LATE_ATTEMPT_RECORDED`.
    async fn outcome(&self) -> Option<AttemptOutcome> {
        self.0.outcome
    }
    async fn occurred_at(&self) -> Timestamp {
        Timestamp(self.0.occurred_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_whole_numbers() {
        assert_eq!(parse_event_id(&ID("42".into())).ok(), Some(42));
        assert_eq!(parse_event_id(&ID("0".into())).ok(), Some(0));
        for bad in ["-1", "4.2", "", "abc", "99999999999999999999"] {
            assert!(
                matches!(
                    parse_event_id(&ID(bad.into())),
                    Err(ApiError::InvalidInput { .. })
                ),
                "{bad}"
            );
        }
    }
}
