//! Delivery state changes for subscribers, in every process.
//!
//! Every statement that changes a delivery also writes one `delivery_events` row, in the
//! change's own transaction, and notifies (db/events.rs). Each process runs one
//! [`EventFeed`] reader, woken by its single `LISTEN` connection (db/listen.rs), which reads
//! new events and broadcasts them in-process to every subscription.
//!
//! ## Publishing only what can no longer be overtaken
//!
//! Event ids come from a sequence, and a transaction that took id 10 can commit after one
//! that took id 11. A subscriber that saw 11 and later resumes "after 11" would then never
//! see 10. So the reader publishes an id only once no transaction can still commit a
//! smaller one. A transaction that holds an event id has had its transaction id since
//! before it took the event id (the event insert reads the rows its statement just wrote,
//! so it comes after the transaction's first write). Each read sees its events under one
//! snapshot (`pg_current_snapshot()`, one statement) and is final at once when nothing of
//! the service's was running then. A snapshot lists as running only the transactions below
//! its `xmax` (the newest completed id + 1), so the read also lists the service's running
//! transactions (`pg_stat_activity`) and then checks that `xmax` has not moved, which means
//! none above it ended in between, so none ran unseen (db/sql/feed_snapshot.sql,
//! feed_read.sql, feed_horizon.sql). An earlier version trusted "nothing listed" alone and
//! could skip an event. When a read is not final at once, its events wait for its horizon:
//! a transaction id the reader takes right after the read, above that of every transaction
//! that could hold a smaller event id. A later read whose snapshot shows every transaction
//! below the horizon ended sees all their events, and publishes through what the earlier
//! read saw. An unbroken run of ids from the frontier (frontier + 1, + 2, …) is final at
//! once, whoever runs: each id is taken once, so nothing can come below it any more. A read
//! that is final at once also publishes what earlier reads saw and left waiting. A prepared
//! (two-phase) transaction is not in `pg_stat_activity`, so one left prepared holds
//! publication past a gap until it is resolved (docs/subscriptions.md). The published ids
//! therefore only grow, and "everything up to the frontier" is final: the frontier is the
//! resume point that makes replay-then-live gap-free and duplicate-free. The cost is one
//! transaction id per read.
//!
//! ## Endpoint events
//!
//! Endpoint state changes (paused, resumed, deleted: `endpoint_events`) are rare, and
//! their writers commit in id order (they hold one advisory lock, db/endpoints.rs), so
//! they need none of the above: every notification on the endpoint channel (and every
//! reconnection of the listener) bumps a counter, and each endpoint subscription reads
//! the events after the last one it sent. One indexed read per subscription per change.
//!
//! ## Slow subscribers
//!
//! The broadcast channel never waits for a receiver. A subscriber that falls more than
//! its capacity behind is told it lagged, and reads what it missed from the table (up to
//! the frontier) before it rejoins the broadcast; nobody else, and no worker, waits for it.
//!
//! ## Catch-up on the read replica
//!
//! With a read replica, a catch-up may read it instead of the primary, but only when the
//! replica has everything up to the frontier. Each read of the reader also takes the
//! primary's log position after it (db/sql/feed_horizon.sql): every event up to the
//! frontier it publishes committed before that position. A catch-up asks the replica how
//! far it has replayed as it starts, and reads it only when it has replayed through the
//! position that came with its frontier; otherwise (behind, unreachable, not a standby of
//! the primary) it reads the primary, as without a replica. The live events after the
//! frontier always come from the primary's reader.
//!
//! Here: the feed and its subscriptions. The commit-safe reader is `reader.rs`; the pruning
//! of events past their retention is an upkeep job (upkeep/history.rs).

use std::sync::{Arc, Mutex};

use futures_util::Stream;
use tokio::sync::{broadcast, watch, Notify};

use crate::db::endpoint_events;
use crate::db::events::{self, EventFilter, HistoryExpired};
use crate::db::models::{EndpointEventRow, EventRow};
use crate::db::replica::WalPosition;
use crate::db::{Db, DbError};
use crate::model::ids::EndpointId;
use crate::replica::Replica;

mod reader;

pub use reader::run_feed;

/// Batches a receiver may fall behind before it catches up from the table instead.
const BROADCAST_CAPACITY: usize = 1_024;
/// Events per catch-up read.
const CATCH_UP_PAGE: i64 = 500;

pub type EventBatch = Arc<[EventRow]>;

/// The process's reader of `delivery_events` and its in-process fan-out.
pub struct EventFeed {
    shared: Mutex<Shared>,
    sender: broadcast::Sender<EventBatch>,
    /// A notification arrived, or a first subscriber is waiting.
    wake: Notify,
    /// The frontier became known.
    ready: Notify,
    /// Turns true when the process stops; open subscriptions end.
    closing: watch::Sender<bool>,
    /// Bumped when an endpoint may have changed (see "Endpoint events").
    endpoint_changes: watch::Sender<u64>,
    /// Where catch-ups may read when it has replayed far enough (see "Catch-up on the
    /// read replica").
    replica: Option<Arc<Replica>>,
}

struct Shared {
    /// Every event up to this id is committed and was broadcast (or predates the feed's
    /// start); nothing at or below it can still appear. `None` while nobody listens.
    frontier: Option<i64>,
    /// The primary's log position taken after the read that fixed the frontier.
    frontier_position: WalPosition,
    subscribers: usize,
    /// Bumped whenever the last subscriber leaves and the frontier is forgotten, so a read
    /// begun before cannot publish into the next start.
    generation: u64,
}

/// A subscription's place in the feed: everything after `frontier` will arrive on
/// `receiver`, in id order.
pub struct Registration {
    pub frontier: i64,
    /// Every event up to `frontier` committed before the primary's log reached this.
    pub position: WalPosition,
    pub receiver: broadcast::Receiver<EventBatch>,
    _subscriber: SubscriberGuard,
}

struct SubscriberGuard(Arc<EventFeed>);

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        let mut shared = self.0.lock();
        shared.subscribers -= 1;
        if shared.subscribers == 0 {
            // Nobody listens: the next subscriber starts from the present, not from a
            // backlog that piled up meanwhile.
            shared.frontier = None;
            shared.generation += 1;
        }
    }
}

/// Why a subscription could not continue.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("the events to resume from were pruned")]
    HistoryExpired { after: i64, pruned_through: i64 },
    #[error(transparent)]
    Storage(#[from] DbError),
    #[error("the server is shutting down")]
    Closing,
}

impl Default for EventFeed {
    fn default() -> Self {
        EventFeed::new()
    }
}

impl EventFeed {
    pub fn new() -> EventFeed {
        EventFeed::with_capacity(BROADCAST_CAPACITY)
    }

    /// A feed whose subscribers may fall `capacity` batches behind before they catch up
    /// from the table (tests use a tiny one to exercise catching up).
    pub fn with_capacity(capacity: usize) -> EventFeed {
        EventFeed {
            shared: Mutex::new(Shared {
                frontier: None,
                frontier_position: WalPosition(0),
                subscribers: 0,
                generation: 0,
            }),
            sender: broadcast::channel(capacity).0,
            wake: Notify::new(),
            ready: Notify::new(),
            closing: watch::channel(false).0,
            endpoint_changes: watch::channel(0).0,
            replica: None,
        }
    }

    /// Lets catch-ups read `replica` once it has replayed through their frontier.
    pub fn catch_up_on(&mut self, replica: Arc<Replica>) {
        self.replica = Some(replica);
    }

    /// An endpoint changed (or the listener reconnected and may have missed it).
    pub fn notify_endpoint_changed(&self) {
        self.endpoint_changes
            .send_modify(|seen| *seen = seen.wrapping_add(1));
    }

    /// The endpoint events (only `endpoint`'s, when given) after `after`, or from now
    /// without it: those committed already, then each new one as it commits, in id order,
    /// each once. Ends when the process stops.
    pub fn subscribe_endpoint_events(
        &self,
        db: Db,
        endpoint: Option<EndpointId>,
        after: Option<i64>,
    ) -> impl Stream<Item = Result<EndpointEventRow, FeedError>> + Send + 'static {
        // Subscribed before the first read, so no change after it goes unnoticed.
        let mut changes = self.endpoint_changes.subscribe();
        let mut closing = self.closing();
        async_stream::try_stream! {
            let mut cursor = match after {
                Some(after) => after,
                None => db.run(async |conn| endpoint_events::newest_event_id(conn).await).await?,
            };
            loop {
                changes.mark_unchanged();
                loop {
                    let page = db
                        .run(async |conn| {
                            endpoint_events::events_after(conn, cursor, endpoint.as_ref(), CATCH_UP_PAGE).await
                        })
                        .await?;
                    let full = page.len() as i64 == CATCH_UP_PAGE;
                    for event in page {
                        cursor = event.id;
                        yield event;
                    }
                    if !full {
                        break;
                    }
                }
                if *closing.borrow() {
                    break;
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = closing.changed() => break,
                }
            }
        }
    }

    /// A notification arrived (or the listener reconnected and may have missed some).
    pub fn notify(&self) {
        self.wake.notify_one();
    }

    /// Resolves when the process is stopping.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // The lock guards plain numbers; a panic while holding it cannot leave them torn.
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Joins the feed; waits until the reader has established the frontier.
    pub async fn register(self: &Arc<Self>) -> Result<Registration, FeedError> {
        let guard = {
            let mut shared = self.lock();
            shared.subscribers += 1;
            SubscriberGuard(self.clone())
        };
        let mut closing = self.closing();
        loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            {
                let shared = self.lock();
                if let Some(frontier) = shared.frontier {
                    // Under the lock the reader cannot publish between the two.
                    return Ok(Registration {
                        frontier,
                        position: shared.frontier_position,
                        receiver: self.sender.subscribe(),
                        _subscriber: guard,
                    });
                }
            }
            if *closing.borrow() {
                return Err(FeedError::Closing);
            }
            self.wake.notify_one();
            tokio::select! {
                _ = ready => {}
                _ = closing.changed() => return Err(FeedError::Closing),
            }
        }
    }

    /// The events matching `filter` after `after` (or from now, without it): first those
    /// already committed, read from the table, then live ones, each exactly once, in id
    /// order. `started` learns the id the stream starts after, once it is known.
    pub fn subscribe(
        self: &Arc<Self>,
        db: Db,
        filter: EventFilter,
        after: Option<i64>,
        started: impl FnOnce(i64) + Send + 'static,
    ) -> impl Stream<Item = Result<EventRow, FeedError>> + Send + 'static {
        let feed = self.clone();
        async_stream::try_stream! {
            let mut registration = feed.register().await?;
            // Everything at or below `cursor` has been given to the subscriber (or skipped).
            let mut cursor = after.unwrap_or(registration.frontier);
            started(cursor);
            loop {
                if cursor < registration.frontier {
                    let history = match &feed.replica {
                        Some(replica) => replica.for_catch_up(&db, registration.position).await,
                        None => db.clone(),
                    };
                    let mut from = cursor;
                    loop {
                        let page = catch_up_page(&history, from, registration.frontier, &filter).await?;
                        let full = page.len() as i64 == CATCH_UP_PAGE;
                        for event in page {
                            from = event.id;
                            yield event;
                        }
                        if !full {
                            break;
                        }
                    }
                    cursor = registration.frontier;
                }
                match live(&mut registration.receiver, &mut cursor, &filter).await {
                    Live::Events(events) => {
                        for event in events {
                            yield event;
                        }
                    }
                    Live::Lagged => {
                        // Rejoin further on and read the gap from the table.
                        registration = feed.register().await?;
                    }
                    Live::Closed => break,
                }
            }
        }
    }
}

enum Live {
    Events(Vec<EventRow>),
    Lagged,
    Closed,
}

/// The next broadcast batch's events that match and are after `cursor`.
async fn live(
    receiver: &mut broadcast::Receiver<EventBatch>,
    cursor: &mut i64,
    filter: &EventFilter,
) -> Live {
    loop {
        match receiver.recv().await {
            Ok(batch) => {
                let mut matching = Vec::new();
                for event in batch.iter() {
                    if event.id > *cursor {
                        *cursor = event.id;
                        if filter.matches(event) {
                            matching.push(event.clone());
                        }
                    }
                }
                if !matching.is_empty() {
                    return Live::Events(matching);
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => return Live::Lagged,
            Err(broadcast::error::RecvError::Closed) => return Live::Closed,
        }
    }
}

async fn catch_up_page(
    db: &Db,
    after: i64,
    through: i64,
    filter: &EventFilter,
) -> Result<Vec<EventRow>, FeedError> {
    let page = db
        .run(async |conn| events::page(conn, after, through, filter, CATCH_UP_PAGE).await)
        .await?;
    match page {
        Ok(page) => Ok(page),
        Err(HistoryExpired { pruned_through }) => Err(FeedError::HistoryExpired {
            after,
            pruned_through,
        }),
    }
}
