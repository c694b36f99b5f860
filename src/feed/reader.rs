//! The process's one reader of `delivery_events`: reads in rounds while anyone is
//! subscribed, decides which events can no longer be overtaken (the module documentation
//! of `feed` says how) and publishes them to the subscriptions.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::EventFeed;
use crate::db::events;
use crate::db::models::EventRow;
use crate::db::replica::WalPosition;
use crate::db::{Db, DbError};

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
        let position = snapshot.wal_position;
        let start = pending.take().unwrap_or(Pending {
            generation,
            through: newest,
            horizon: snapshot.horizon,
        });
        let decision = decide(Some(start), generation, 0, snapshot, Vec::new(), false);
        *pending = decision.pending;
        let started = decision.publish.is_some();
        if let Some((through, events)) = decision.publish {
            publish(feed, generation, through, position, events);
        }
        // Once started, read what came meanwhile at once.
        return Ok(started);
    };
    let read = db
        .run(async |conn| events::read_feed(conn, frontier, ROUND_LIMIT).await)
        .await?;
    let full = read.events.len() as i64 == ROUND_LIMIT;
    let position = read.snapshot.wal_position;
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
        publish(feed, generation, through, position, events);
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
/// `position`: the primary's log position taken after the read that allowed it, past the
/// commit of every event up to `through` (a catch-up on the replica waits for it).
fn publish(
    feed: &EventFeed,
    generation: u64,
    through: i64,
    position: WalPosition,
    events: Vec<EventRow>,
) {
    let mut shared = feed.lock();
    if shared.generation != generation
        || shared.frontier.is_some_and(|frontier| frontier >= through)
    {
        return;
    }
    shared.frontier = Some(through);
    shared.frontier_position = position;
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
            wal_position: WalPosition(0),
        }
    }

    /// A read of `events` by generation 0 that did not fill its batch.
    fn read(pending: Option<Pending>, snapshot: Snapshot, events: &[i64]) -> Decision {
        decide(
            pending,
            0,
            0,
            snapshot,
            events.iter().map(|&id| event(id)).collect(),
            false,
        )
    }

    fn ids(decision: &Decision) -> Option<(i64, Vec<i64>)> {
        decision
            .publish
            .as_ref()
            .map(|(through, events)| (*through, events.iter().map(|e| e.id).collect()))
    }

    #[test]
    fn with_everything_below_the_horizon_ended_everything_read_is_published() {
        let decision = read(None, snapshot(100, &[], 100), &[5, 6]);
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
        let decision = read(Some(waiting), snapshot(100, &[], 100), &[]);
        assert_eq!(ids(&decision), Some((10, vec![])));
        assert!(decision.pending.is_none() && !decision.again);
    }

    /// The gap an earlier version left: nothing listed as running, but the newest
    /// completed transaction is 97, so 98 (which may hold id 4) is running unlisted.
    #[test]
    fn a_transaction_from_the_snapshots_xmax_on_is_waited_for() {
        let first = read(None, snapshot(98, &[], 100), &[5, 6]);
        assert_eq!(ids(&first), None);
        let waiting = first.pending.expect("pending");
        assert_eq!((waiting.through, waiting.horizon), (6, 100));
        // 98 and 99 have ended (the newest completed is now 101).
        let second = read(Some(waiting), snapshot(102, &[], 103), &[4, 5, 6]);
        assert_eq!(ids(&second), Some((6, vec![4, 5, 6])));
    }

    #[test]
    fn events_wait_for_the_transactions_below_the_horizon() {
        // Transaction 90 may hold id 4 and commit later: 5 and 6 must wait.
        let first = read(None, snapshot(100, &[90], 100), &[5, 6]);
        assert_eq!(ids(&first), None);
        let waiting = first.pending.expect("pending");
        assert_eq!((waiting.through, waiting.horizon), (6, 100));

        // 90 still running: still nothing, the wait unchanged.
        let second = read(Some(waiting), snapshot(102, &[90, 101], 102), &[5, 6, 7]);
        assert_eq!(ids(&second), None);
        let waiting = second.pending.expect("pending");
        assert_eq!((waiting.through, waiting.horizon), (6, 100));

        // 90 ended (and committed 4): up to 6 is final; 7 now waits for 101.
        let third = read(Some(waiting), snapshot(104, &[101], 104), &[4, 5, 6, 7]);
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
        let ended = read(Some(waiting), snapshot(52, &[51], 52), &[]);
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
