//! The delivery change feed: every statement that changes a delivery writes its event in
//! the same transaction (sql/write_events.sql, appended to each of them); this module
//! reads and pages them (db/history.rs drops them, a partition at a time).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{EventRow, EventRowSql};
use super::replica::WalPosition;
use super::schema::{delivery_event_retention, delivery_events, webhook_deliveries};
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::{DeliveryId, DestinationId, EndpointId};
use crate::model::state::DeliveryState;

/// What says which of a read's events are final (db/sql/feed_snapshot.sql,
/// feed_horizon.sql): the snapshot the read saw them under (`pg_current_snapshot()`: every
/// transaction id below `xmax` that is not `in_progress` had ended), whether they are final
/// already, and the horizon a later read waits for when they are not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub xmax: i64,
    /// Running at the snapshot, without the transactions that cannot write events.
    pub in_progress: Vec<i64>,
    /// No transaction could still commit an event id below one the read saw: nothing of
    /// the service's ran at the snapshot, listed or not.
    pub final_now: bool,
    /// A transaction id assigned after the read: once every transaction below it has
    /// ended, the read's events are final.
    pub horizon: i64,
    /// The primary's log position taken with the horizon, after the read: past the commit
    /// of every event the read saw, and of every event a later read finds final because
    /// the transactions below an earlier horizon ended before it.
    pub wal_position: WalPosition,
}

impl Snapshot {
    /// Parses PostgreSQL's text form `xmin:xmax:xip,xip,…` into (xmax, running).
    pub fn parse(text: &str) -> Option<(i64, Vec<i64>)> {
        let mut parts = text.split(':');
        let _xmin: i64 = parts.next()?.parse().ok()?;
        let xmax: i64 = parts.next()?.parse().ok()?;
        let list = parts.next()?;
        let in_progress = if list.is_empty() {
            Vec::new()
        } else {
            list.split(',')
                .map(|xid| xid.parse().ok())
                .collect::<Option<Vec<i64>>>()?
        };
        Some((xmax, in_progress))
    }

    /// From what feed_snapshot.sql and feed_horizon.sql answered. Transactions are told
    /// apart by their 32-bit id (what `pg_stat_activity` shows), which is unique among the
    /// transactions running at any moment.
    fn new(
        text: &str,
        foreign: &[i64],
        own: &[i64],
        horizon: i64,
        xmax_after: i64,
        wal_position: WalPosition,
    ) -> Option<Snapshot> {
        let (xmax, mut in_progress) = Snapshot::parse(text)?;
        in_progress.retain(|xid| !foreign.contains(&(xid & 0xFFFF_FFFF)));
        let listed: Vec<i64> = in_progress.iter().map(|xid| xid & 0xFFFF_FFFF).collect();
        // One of the service's running at the read but not listed: at or above its xmax.
        let unlisted = own.iter().any(|xid| !listed.contains(xid));
        Some(Snapshot {
            final_now: in_progress.is_empty() && !unlisted && xmax_after == xmax,
            xmax,
            in_progress,
            horizon,
            wal_position,
        })
    }

    /// Whether every transaction below `bound` (but those that cannot write events) had
    /// ended when this snapshot was taken: it lists every running one below its `xmax`,
    /// so it can tell only up to there.
    pub fn settled(&self, bound: i64) -> bool {
        self.xmax >= bound && self.in_progress.iter().all(|xid| *xid >= bound)
    }
}

/// What one read of the feed saw, under one snapshot.
#[derive(Debug)]
pub struct FeedRead {
    pub snapshot: Snapshot,
    /// Visible events after `after`, in id order, at most `limit`.
    pub events: Vec<EventRow>,
}

// The statements of a feed read, each after the shared start (feed_snapshot.sql).
static FEED_START: SqlText = sql!("feed_snapshot.sql", "feed_start.sql");
struct FeedStart;
static FEED_READ: SqlText = sql!("feed_snapshot.sql", "feed_read.sql");
struct ReadFeed;
static FEED_HORIZON: SqlText = sql!("feed_horizon.sql");
struct FeedHorizon;

/// The snapshot and who ran at it, as feed_snapshot.sql answers them: the snapshot's text,
/// the other applications' running transaction ids, the service's own.
type Seen = (String, Vec<i64>, Vec<i64>);
type SeenSql = (
    Text,
    diesel::sql_types::Array<BigInt>,
    diesel::sql_types::Array<BigInt>,
);

/// Completes a read's snapshot with the horizon taken after it (feed_horizon.sql, a
/// transaction of its own).
async fn with_horizon(
    conn: &mut AsyncPgConnection,
    (text, foreign, own): Seen,
) -> Result<Snapshot, DbError> {
    let (horizon, xmax_after, wal_position): (i64, i64, i64) =
        Statement::<FeedHorizon, (BigInt, BigInt, BigInt), _>::new(&FEED_HORIZON, ())
            .get_result(conn)
            .await?;
    Snapshot::new(
        &text,
        &foreign,
        &own,
        horizon,
        xmax_after,
        WalPosition(wal_position),
    )
    .ok_or_else(|| {
        DbError::Query(diesel::result::Error::DeserializationError(
            format!("unexpected snapshot text {text:?}").into(),
        ))
    })
}

/// Where a reader starts: the highest event id and the snapshot it was read under (one
/// statement, feed_start.sql), then the horizon.
pub async fn read_start(conn: &mut AsyncPgConnection) -> Result<(Snapshot, i64), DbError> {
    let (seen, newest): (Seen, i64) = Statement::<FeedStart, (SeenSql, BigInt), _>::new(
        &FEED_START,
        (bind::<Text, _>(super::APPLICATION_NAME),),
    )
    .get_result(conn)
    .await?;
    Ok((with_horizon(conn, seen).await?, newest))
}

/// Reads the events after `after` together with the snapshot they were read under (one
/// statement, feed_read.sql, so both describe the same moment), then the horizon.
pub async fn read_feed(
    conn: &mut AsyncPgConnection,
    after: i64,
    limit: i64,
) -> Result<FeedRead, DbError> {
    let rows: Vec<(Seen, Option<EventRow>)> =
        Statement::<ReadFeed, (SeenSql, Nullable<EventRowSql>), _>::new(
            &FEED_READ,
            (
                bind::<Text, _>(super::APPLICATION_NAME),
                bind::<BigInt, _>(after),
                bind::<BigInt, _>(limit),
            ),
        )
        .load(conn)
        .await?;
    // Every row carries the same snapshot; a row without an event is the only one.
    let mut rows = rows.into_iter();
    let Some((seen, first)) = rows.next() else {
        return Err(DbError::Query(diesel::result::Error::NotFound));
    };
    let mut events: Vec<EventRow> = first.into_iter().collect();
    for (_, event) in rows {
        events.push(event.ok_or(DbError::Query(diesel::result::Error::NotFound))?);
    }
    Ok(FeedRead {
        snapshot: with_horizon(conn, seen).await?,
        events,
    })
}

/// What a subscriber wants to see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub endpoint_id: Option<EndpointId>,
    pub delivery_id: Option<DeliveryId>,
    /// One destination's deliveries.
    pub destination_id: Option<DestinationId>,
    /// `None` is every state.
    pub states: Option<Vec<DeliveryState>>,
}

impl EventFilter {
    /// A filter no event matches (an empty list of states matches none).
    pub fn nothing() -> EventFilter {
        EventFilter {
            states: Some(Vec::new()),
            ..EventFilter::default()
        }
    }

    pub fn matches(&self, event: &EventRow) -> bool {
        self.endpoint_id
            .as_ref()
            .is_none_or(|id| *id == event.endpoint_id)
            && self
                .delivery_id
                .as_ref()
                .is_none_or(|id| *id == event.delivery_id)
            && self
                .destination_id
                .as_ref()
                .is_none_or(|id| event.delivery.destination_id.as_ref() == Some(id))
            && self
                .states
                .as_ref()
                .is_none_or(|states| states.contains(&event.state))
    }
}

/// The subscriber asked to resume from before what retention kept.
#[derive(Debug, PartialEq, Eq)]
pub struct HistoryExpired {
    pub pruned_through: i64,
}

/// Matching events in `(after, through]`, in id order, at most `limit`; or, when events
/// after `after` were already pruned, how far pruning went. Both are read under one
/// snapshot, so a page that is returned is complete.
pub async fn page(
    conn: &mut AsyncPgConnection,
    after: i64,
    through: i64,
    filter: &EventFilter,
    limit: i64,
) -> Result<Result<Vec<EventRow>, HistoryExpired>, DbError> {
    let filter = filter.clone();
    Ok(conn
        .build_transaction()
        .repeatable_read()
        .read_only()
        .run::<_, diesel::result::Error, _>(async move |conn| {
            let pruned_through: i64 = delivery_event_retention::table
                .select(delivery_event_retention::pruned_through)
                .first(conn)
                .await?;
            if pruned_through > after {
                return Ok(Err(HistoryExpired { pruned_through }));
            }
            // A delivery is deleted only with its events (when its endpoint is erased), so
            // the join loses none.
            let mut query = delivery_events::table
                .inner_join(
                    webhook_deliveries::table
                        .on(webhook_deliveries::id.eq(delivery_events::delivery_id)),
                )
                .filter(delivery_events::id.gt(after))
                .filter(delivery_events::id.le(through))
                .into_boxed();
            if let Some(endpoint_id) = filter.endpoint_id {
                query = query.filter(delivery_events::endpoint_id.eq(endpoint_id));
            }
            if let Some(delivery_id) = filter.delivery_id {
                query = query.filter(delivery_events::delivery_id.eq(delivery_id));
            }
            if let Some(destination_id) = filter.destination_id {
                query = query.filter(webhook_deliveries::destination_id.eq(destination_id));
            }
            if let Some(states) = filter.states {
                query = query.filter(delivery_events::state.eq_any(states));
            }
            let events = query
                .order(delivery_events::id.asc())
                .limit(limit)
                .select(EventRow::as_select())
                .load(conn)
                .await?;
            Ok(Ok(events))
        })
        .await?)
}

#[cfg(test)]
impl EventRow {
    /// A created event of a pending delivery.
    pub fn for_tests(id: i64, delivery: &str, endpoint: &str, state: DeliveryState) -> EventRow {
        use crate::db::models::DeliveryRow;
        let now = chrono::Utc::now();
        let delivery_id = DeliveryId::parse(delivery).expect("a delivery id");
        let endpoint_id = EndpointId::parse(endpoint).expect("an endpoint id");
        EventRow {
            id,
            delivery_id: delivery_id.clone(),
            endpoint_id: endpoint_id.clone(),
            kind: crate::model::state::EventKind::Created,
            state,
            previous_state: None,
            attempts: 0,
            cycle_attempts: 0,
            outcome: None,
            occurred_at: now,
            delivery: DeliveryRow {
                id: delivery_id,
                submission_id: None,
                endpoint_id,
                destination_id: None,
                destination_url: "https://example.com/hook".into(),
                state,
                attempts: 0,
                cycle_attempts: 0,
                next_attempt_at: now,
                claim_expires_at: None,
                created_at: now,
                completed_at: None,
            },
        }
    }
}

/// How far a new timeline moves the event id sequences on (db/sql/enter_timeline.sql):
/// more ids than asynchronous replication can lose in a failover. A standby more than
/// 16 MB of WAL behind is not promoted by pg_auto_failover
/// (`pgautofailover.promote_wal_log_threshold`), and every event costs well over
/// 100 bytes of WAL, so fewer than 200,000 ids can be lost; the margin is fifty times that.
pub const TIMELINE_ID_MARGIN: i64 = 10_000_000;

static ENTER_TIMELINE: SqlText = sql!("enter_timeline.sql");
struct EnterTimeline;

/// Where a newly opened connection writes: the server's timeline (`None` on a standby),
/// and whether this connection was the service's first on it, and so moved the event id
/// sequences past the previous timeline's (a failover).
pub async fn enter_timeline(conn: &mut AsyncPgConnection) -> Result<(Option<i32>, bool), DbError> {
    use diesel::sql_types::{Bool, Integer};
    Ok(
        Statement::<EnterTimeline, (Nullable<Integer>, Bool), _>::new(
            &ENTER_TIMELINE,
            (bind::<BigInt, _>(TIMELINE_ID_MARGIN),),
        )
        .get_result(conn)
        .await?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_parse_and_tell_when_everything_below_a_bound_ended() {
        let snapshot = Snapshot::new(
            "100:105:100,103",
            &[],
            &[100, 103],
            106,
            105,
            WalPosition(0),
        )
        .expect("parses");
        assert_eq!(
            (snapshot.xmax, snapshot.in_progress.clone()),
            (105, vec![100, 103])
        );
        assert!(!snapshot.final_now);
        assert!(snapshot.settled(100));
        assert!(!snapshot.settled(101), "100 runs");
        assert!(!snapshot.settled(104), "103 runs");
        // 105 may have been assigned and be running: a snapshot lists nothing from its
        // xmax on, so it cannot say.
        assert!(!snapshot.settled(106));
        let quiet = Snapshot::new("7:7:", &[], &[], 8, 7, WalPosition(0)).expect("parses");
        assert!(quiet.final_now);
        // Nothing listed, but one of the service's runs from xmax on.
        assert!(
            !Snapshot::new("7:7:", &[], &[7], 8, 7, WalPosition(0))
                .expect("parses")
                .final_now
        );
        // Nothing listed and nothing seen running, but a transaction from xmax on ended
        // in between (the xmax moved): it may have run unseen at the read.
        assert!(
            !Snapshot::new("7:7:", &[], &[], 9, 8, WalPosition(0))
                .expect("parses")
                .final_now
        );
        assert_eq!(Snapshot::new("7:x:", &[], &[], 7, 7, WalPosition(0)), None);
        // A transaction of another database, known by its 32-bit id, is not waited for.
        let epoch_two = (2i64 << 32) + 103;
        let snapshot = Snapshot::new(
            &format!("100:{}:100,{epoch_two}", epoch_two + 1),
            &[103],
            &[100],
            epoch_two + 2,
            epoch_two + 1,
            WalPosition(0),
        )
        .expect("parses");
        assert_eq!(snapshot.in_progress, vec![100]);
        assert_eq!(Snapshot::parse("7"), None);
    }

    #[test]
    fn filters_match_on_every_given_field() {
        use DeliveryState::*;
        let (a, b) = (
            format!("whd_{}", "a".repeat(32)),
            format!("whd_{}", "b".repeat(32)),
        );
        let event = EventRow::for_tests(1, &a, "contact", Pending);
        assert!(EventFilter::default().matches(&event));
        let on =
            |endpoint: Option<&str>, delivery: Option<&str>, states: Option<&[DeliveryState]>| {
                EventFilter {
                    endpoint_id: endpoint.and_then(EndpointId::parse),
                    delivery_id: delivery.and_then(DeliveryId::parse),
                    destination_id: None,
                    states: states.map(<[DeliveryState]>::to_vec),
                }
                .matches(&event)
            };
        assert!(on(Some("contact"), Some(&a), Some(&[Pending])));
        assert!(!on(Some("other"), None, None));
        assert!(!on(None, Some(&b), None));
        assert!(!on(None, None, Some(&[Failed, Delivered])));
        assert!(!on(None, None, Some(&[])));
        // A destination filter matches that destination's deliveries only.
        let destination = DestinationId::parse(&format!("dst_{}", "c".repeat(32)));
        let to = |destination_id: Option<DestinationId>, event: &EventRow| {
            EventFilter {
                destination_id,
                ..EventFilter::default()
            }
            .matches(event)
        };
        assert!(
            !to(destination.clone(), &event),
            "history has no destination"
        );
        let mut placed = event.clone();
        placed.delivery.destination_id = destination.clone();
        assert!(to(destination, &placed));
        assert!(!to(
            DestinationId::parse(&format!("dst_{}", "d".repeat(32))),
            &placed
        ));
    }
}
