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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::{broadcast, watch, Notify};
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::db::endpoints;
use crate::db::events::{self, EventFilter, HistoryExpired};
use crate::db::models::{EndpointEventRow, EventRow};
use crate::db::{Db, DbError};
use crate::model::ids::EndpointId;

/// Events read per round; a full round is followed by another at once.
const ROUND_LIMIT: i64 = 1_000;
/// Rounds are at least this far apart, so a busy database gets at most a few dozen cheap
/// reads a second from each process, however many changes it commits, and each subscribed
/// socket one write per round: with many sockets, shorter spacing costs more machine than
/// it saves latency (docs/subscriptions.md, "Batches").
const ROUND_SPACING: Duration = Duration::from_millis(25);
/// While read events wait for older transactions to end, look again this often even if no
/// notification comes (the transaction that holds them up may write no event).
const PENDING_RECHECK: Duration = Duration::from_millis(10);
/// A safety net for a lost notification while anyone is subscribed.
const IDLE_RECHECK: Duration = Duration::from_secs(1);
/// Batches a receiver may fall behind before it catches up from the table instead.
const BROADCAST_CAPACITY: usize = 1_024;
/// Events per catch-up read.
const CATCH_UP_PAGE: i64 = 500;
/// Pruning runs this often, deleting this many events per statement.
const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);
const PRUNE_BATCH: i64 = 10_000;

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
}

struct Shared {
    /// Every event up to this id is committed and was broadcast (or predates the feed's
    /// start); nothing at or below it can still appear. `None` while nobody listens.
    frontier: Option<i64>,
    subscribers: usize,
    /// Bumped whenever the last subscriber leaves and the frontier is forgotten, so a read
    /// begun before cannot publish into the next start.
    generation: u64,
}

/// A subscription's place in the feed: everything after `frontier` will arrive on
/// `receiver`, in id order.
pub struct Registration {
    pub frontier: i64,
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
                subscribers: 0,
                generation: 0,
            }),
            sender: broadcast::channel(capacity).0,
            wake: Notify::new(),
            ready: Notify::new(),
            closing: watch::channel(false).0,
            endpoint_changes: watch::channel(0).0,
        }
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
                None => db.run(async |conn| endpoints::newest_event_id(conn).await).await?,
            };
            loop {
                changes.mark_unchanged();
                loop {
                    let page = db
                        .run(async |conn| {
                            endpoints::events_after(conn, cursor, endpoint.as_ref(), CATCH_UP_PAGE).await
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
                    let mut from = cursor;
                    loop {
                        let page = catch_up_page(&db, from, registration.frontier, &filter).await?;
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

/// Events read but not yet publishable: they wait for the transactions that were in
/// progress when they were read.
struct Pending {
    generation: u64,
    through: i64,
    /// Final once every transaction below this has ended: the horizon of the read that
    /// saw them.
    horizon: i64,
}

/// Runs the process's reader until `shutdown`: reads only while someone is subscribed.
pub async fn run_feed(db: Db, feed: Arc<EventFeed>, shutdown: CancellationToken) {
    let mut pending: Option<Pending> = None;
    let mut again = false;
    let mut last_round = Instant::now() - ROUND_SPACING;
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        let subscribed = feed.lock().subscribers > 0;
        if !subscribed {
            again = false;
        }
        if !again {
            let recheck = match (&pending, subscribed) {
                (_, false) => None,
                (Some(_), true) => Some(PENDING_RECHECK),
                (None, true) => Some(IDLE_RECHECK),
            };
            tokio::select! {
                _ = feed.wake.notified() => {}
                _ = sleep_or_forever(recheck) => {}
                _ = shutdown.cancelled() => break,
            }
        }
        // Let notifications pile up into one read.
        tokio::time::sleep_until(last_round + ROUND_SPACING).await;
        last_round = Instant::now();
        if feed.lock().subscribers == 0 {
            continue;
        }
        match round(&db, &feed, &mut pending).await {
            Ok(more) => again = more,
            Err(error) => {
                tracing::warn!(error = %error.summary(), "cannot read delivery events; retrying");
                again = false;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        }
    }
    let _ = feed.closing.send(true);
}

async fn sleep_or_forever(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

/// One read: publishes what became final, remembers what must wait. Returns whether
/// another round should follow at once.
async fn round(db: &Db, feed: &EventFeed, pending: &mut Option<Pending>) -> Result<bool, DbError> {
    let (frontier, generation) = {
        let shared = feed.lock();
        (shared.frontier, shared.generation)
    };
    if pending.as_ref().is_some_and(|p| p.generation != generation) {
        *pending = None;
    }
    let Some(frontier) = frontier else {
        // Starting: everything visible now is the past once the transactions in progress
        // have ended. The start waits like any read events: as one pending through the
        // newest id, decided by the same rule.
        let (snapshot, newest) = db.run(async |conn| events::read_start(conn).await).await?;
        let start = pending.take().unwrap_or(Pending {
            generation,
            through: newest,
            horizon: snapshot.horizon,
        });
        let decision = decide(Some(start), generation, 0, snapshot, Vec::new(), false);
        *pending = decision.pending;
        let started = decision.publish.is_some();
        if let Some((through, events)) = decision.publish {
            publish(feed, generation, through, events);
        }
        // Once started, read what came meanwhile at once.
        return Ok(started);
    };
    let read = db
        .run(async |conn| events::read_feed(conn, frontier, ROUND_LIMIT).await)
        .await?;
    let full = read.events.len() as i64 == ROUND_LIMIT;
    let decision = decide(
        pending.take(),
        generation,
        frontier,
        read.snapshot,
        read.events,
        full,
    );
    *pending = decision.pending;
    if let Some((through, events)) = decision.publish {
        publish(feed, generation, through, events);
    }
    Ok(decision.again)
}

/// What one read allows.
struct Decision {
    /// The new frontier and the events up to it, in id order.
    publish: Option<(i64, Vec<EventRow>)>,
    pending: Option<Pending>,
    /// Read again at once.
    again: bool,
}

/// Decides, from the events a read saw (after `frontier`, in id order, `full` when the
/// read hit its limit) and the snapshot it saw them under, which are final.
fn decide(
    mut pending: Option<Pending>,
    generation: u64,
    frontier: i64,
    snapshot: events::Snapshot,
    read: Vec<EventRow>,
    full: bool,
) -> Decision {
    let mut events: VecDeque<EventRow> = read.into();
    let mut through = None;
    // Every transaction below an earlier read's horizon has ended: what that read saw is
    // final (and visible to this read, which came later).
    if let Some(waiting) = pending.as_ref() {
        if snapshot.settled(waiting.horizon) {
            through = Some(waiting.through);
            pending = None;
        }
    }
    // Nothing of the service's ran at this read, listed or not: everything it saw is
    // final, and so is everything an earlier read saw (a waiting start among them).
    if snapshot.final_now {
        through = [
            through,
            events.back().map(|last| last.id),
            pending.as_ref().map(|waiting| waiting.through),
        ]
        .into_iter()
        .flatten()
        .max();
        pending = None;
    }
    // Every id from the frontier on up to some id is there: nothing can come below it
    // any more (each id is taken once), whoever runs. The usual case under load, where
    // some transaction is nearly always running.
    let unbroken = events
        .iter()
        .zip(frontier.saturating_add(1)..)
        .take_while(|(event, expected)| event.id == *expected)
        .last()
        .map(|(event, _)| event.id);
    if let Some(unbroken) = unbroken {
        through = Some(through.map_or(unbroken, |t: i64| t.max(unbroken)));
        if pending
            .as_ref()
            .is_some_and(|waiting| waiting.through <= unbroken)
        {
            pending = None;
        }
    }
    let mut publish = None;
    if let Some(final_through) = through {
        // A truncated read has not seen every final event: publish what it saw and leave
        // the rest (already final) to the next round.
        let read_through = match events.back() {
            Some(last) if full => final_through.min(last.id),
            _ => final_through,
        };
        let mut published = Vec::new();
        while events.front().is_some_and(|event| event.id <= read_through) {
            published.extend(events.pop_front());
        }
        publish = Some((read_through, published));
        if read_through < final_through {
            pending = Some(Pending {
                generation,
                through: final_through,
                horizon: 0,
            });
        }
    }
    // What remains waits for the transactions below this read's horizon.
    if pending.is_none() {
        if let Some(last) = events.back() {
            pending = Some(Pending {
                generation,
                through: last.id,
                horizon: snapshot.horizon,
            });
        }
    }
    Decision {
        // A full read that could publish nothing waits for what holds it up.
        again: full && publish.is_some(),
        publish,
        pending,
    }
}

/// Moves the frontier to `through` and broadcasts `events` (all at or below it), under
/// the lock registrations take, so each registration gets a consistent (frontier, receiver).
fn publish(feed: &EventFeed, generation: u64, through: i64, events: Vec<EventRow>) {
    let mut shared = feed.lock();
    if shared.generation != generation
        || shared.frontier.is_some_and(|frontier| frontier >= through)
    {
        return;
    }
    shared.frontier = Some(through);
    let newest = events.last().map(|event| event.occurred_at);
    if !events.is_empty() {
        // No receiver is not an error: subscribers come and go.
        let _ = feed.sender.send(events.into());
    }
    drop(shared);
    feed.ready.notify_waiters();
    // Outside the lock registrations wait on.
    if let Some(newest) = newest {
        // An event stamped ahead of this process's clock (the database's runs fast) is no lag.
        let age = (chrono::Utc::now() - newest).to_std().unwrap_or_default();
        crate::telemetry::meters::event_feed_lag(age);
    }
}

/// Deletes events older than `retention`, at start and hourly, until `shutdown`.
pub async fn prune_on_schedule(
    db: Db,
    retention: Duration,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) {
    // The configuration bounds the retention to a year: always representable.
    let retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
    loop {
        match clock.now().checked_sub_signed(retention) {
            Some(cutoff) => match prune(&db, cutoff).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned delivery events past retention"),
                Err(error) => {
                    tracing::warn!(error = %error.summary(), "cannot prune delivery events")
                }
            },
            None => tracing::error!("the event retention reaches before any time; nothing pruned"),
        }
        tokio::select! {
            _ = tokio::time::sleep(PRUNE_INTERVAL) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Deletes every event older than `cutoff`, a batch per statement; returns how many.
pub async fn prune(db: &Db, cutoff: chrono::DateTime<chrono::Utc>) -> Result<i64, DbError> {
    let mut total = 0;
    loop {
        let pruned = db
            .run(async |conn| events::prune_before(conn, cutoff, PRUNE_BATCH).await)
            .await?;
        total += pruned;
        if pruned < PRUNE_BATCH {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::events::Snapshot;

    fn event(id: i64) -> EventRow {
        EventRow::for_tests(
            id,
            &format!("whd_{id:032x}"),
            "contact",
            crate::model::state::DeliveryState::Pending,
        )
    }

    /// A read's snapshot whose horizon is `horizon`; final at once when nothing ran,
    /// listed or not.
    fn snapshot(xmax: i64, in_progress: &[i64], horizon: i64) -> Snapshot {
        Snapshot {
            xmax,
            in_progress: in_progress.to_vec(),
            final_now: in_progress.is_empty() && horizon == xmax,
            horizon,
        }
    }

    fn ids(decision: &Decision) -> Option<(i64, Vec<i64>)> {
        decision
            .publish
            .as_ref()
            .map(|(through, events)| (*through, events.iter().map(|e| e.id).collect()))
    }

    #[test]
    fn with_everything_below_the_horizon_ended_everything_read_is_published() {
        let decision = decide(
            None,
            0,
            0,
            snapshot(100, &[], 100),
            vec![event(5), event(6)],
            false,
        );
        assert_eq!(ids(&decision), Some((6, vec![5, 6])));
        assert!(decision.pending.is_none() && !decision.again);
    }

    /// A quiet read publishes what an earlier one saw and left waiting, though it reads
    /// nothing new itself (the start, here).
    #[test]
    fn a_final_read_publishes_what_was_waiting_even_with_nothing_new() {
        let waiting = Pending {
            generation: 0,
            through: 10,
            horizon: 200,
        };
        let decision = decide(
            Some(waiting),
            0,
            0,
            snapshot(100, &[], 100),
            Vec::new(),
            false,
        );
        assert_eq!(ids(&decision), Some((10, vec![])));
        assert!(decision.pending.is_none() && !decision.again);
    }

    /// The gap an earlier version left: nothing listed as running, but the newest
    /// completed transaction is 97, so 98 (which may hold id 4) is running unlisted.
    #[test]
    fn a_transaction_from_the_snapshots_xmax_on_is_waited_for() {
        let first = decide(
            None,
            0,
            0,
            snapshot(98, &[], 100),
            vec![event(5), event(6)],
            false,
        );
        assert_eq!(ids(&first), None);
        let waiting = first.pending.expect("pending");
        assert_eq!((waiting.through, waiting.horizon), (6, 100));
        // 98 and 99 have ended (the newest completed is now 101).
        let second = decide(
            Some(waiting),
            0,
            0,
            snapshot(102, &[], 103),
            vec![event(4), event(5), event(6)],
            false,
        );
        assert_eq!(ids(&second), Some((6, vec![4, 5, 6])));
    }

    #[test]
    fn events_wait_for_the_transactions_below_the_horizon() {
        // Transaction 90 may hold id 4 and commit later: 5 and 6 must wait.
        let first = decide(
            None,
            0,
            0,
            snapshot(100, &[90], 100),
            vec![event(5), event(6)],
            false,
        );
        assert_eq!(ids(&first), None);
        let waiting = first.pending.expect("pending");
        assert_eq!((waiting.through, waiting.horizon), (6, 100));

        // 90 still running: still nothing, the wait unchanged.
        let second = decide(
            Some(waiting),
            0,
            0,
            snapshot(102, &[90, 101], 102),
            vec![event(5), event(6), event(7)],
            false,
        );
        assert_eq!(ids(&second), None);
        let waiting = second.pending.expect("pending");
        assert_eq!((waiting.through, waiting.horizon), (6, 100));

        // 90 ended (and committed 4): up to 6 is final; 7 now waits for 101.
        let third = decide(
            Some(waiting),
            0,
            0,
            snapshot(104, &[101], 104),
            vec![event(4), event(5), event(6), event(7)],
            false,
        );
        assert_eq!(ids(&third), Some((6, vec![4, 5, 6])));
        let waiting = third.pending.expect("pending");
        assert_eq!((waiting.through, waiting.horizon), (7, 104));
    }

    #[test]
    fn a_truncated_read_publishes_what_it_saw_and_reads_again() {
        let waiting = Pending {
            generation: 0,
            through: 10,
            horizon: 50,
        };
        let decision = decide(
            Some(waiting),
            0,
            0,
            snapshot(60, &[55], 61),
            vec![event(1), event(2)],
            true,
        );
        assert_eq!(ids(&decision), Some((2, vec![1, 2])));
        assert!(decision.again);
        let rest = decision.pending.expect("the rest stays pending");
        assert_eq!((rest.through, rest.horizon), (10, 0));
        // The next read publishes the rest at once.
        let next = decide(
            Some(rest),
            0,
            0,
            snapshot(60, &[55], 62),
            vec![event(3), event(10), event(11)],
            false,
        );
        assert_eq!(ids(&next), Some((10, vec![3, 10])));
        assert_eq!(next.pending.map(|p| p.through), Some(11));
    }

    #[test]
    fn the_start_waits_for_the_transactions_below_its_horizon_like_any_read() {
        let start = |horizon: i64| Pending {
            generation: 0,
            through: 9,
            horizon,
        };
        let quiet = decide(
            Some(start(50)),
            0,
            0,
            snapshot(50, &[], 50),
            Vec::new(),
            false,
        );
        assert_eq!(ids(&quiet), Some((9, vec![])));
        let busy = decide(
            Some(start(50)),
            0,
            0,
            snapshot(50, &[40], 50),
            Vec::new(),
            false,
        );
        assert_eq!(ids(&busy), None);
        let waiting = busy.pending.expect("still waiting");
        let ended = decide(
            Some(waiting),
            0,
            0,
            snapshot(52, &[51], 52),
            Vec::new(),
            false,
        );
        assert_eq!(ids(&ended), Some((9, vec![])));
    }

    /// Ids from the frontier on without a gap are final whoever runs; past a gap (an id
    /// some running transaction may hold) they wait.
    #[test]
    fn an_unbroken_run_from_the_frontier_is_final_at_once() {
        let decision = decide(
            None,
            0,
            4,
            snapshot(100, &[90], 101),
            vec![event(5), event(6), event(8)],
            false,
        );
        assert_eq!(ids(&decision), Some((6, vec![5, 6])));
        let waiting = decision.pending.expect("8 waits");
        assert_eq!((waiting.through, waiting.horizon), (8, 101));
        // An unbroken run past what waits ends the wait.
        let next = decide(
            Some(waiting),
            0,
            6,
            snapshot(102, &[90], 103),
            vec![event(7), event(8), event(9)],
            false,
        );
        assert_eq!(ids(&next), Some((9, vec![7, 8, 9])));
        assert!(next.pending.is_none());
    }

    #[test]
    fn a_full_read_that_publishes_nothing_does_not_spin() {
        let decision = decide(
            None,
            0,
            0,
            snapshot(60, &[55], 61),
            vec![event(2), event(3)],
            true,
        );
        assert!(decision.publish.is_none());
        assert!(!decision.again);
    }
}
