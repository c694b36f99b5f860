//! The history's upkeep (the `history` job): the event log and the attempt history are
//! partitioned by time (db/history.rs); each pass makes the partitions of the days and
//! months ahead, and drops whole the partitions past their retention: events after
//! `FORMS_EVENT_RETENTION_HOURS` (how far back a subscriber may resume), attempts after
//! `FORMS_ATTEMPT_RETENTION_DAYS` when set. A partition goes once all of its time is past
//! the horizon, so a row is kept at least as long as asked and at most a partition's span
//! longer.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::db::history::{self, HistoryTable, PartitionSpan};
use crate::db::{Db, DbError};

/// Rows of a DEFAULT partition deleted per statement.
const PRUNE_BATCH: i64 = 10_000;
/// How far ahead partitions are made: a week of daily ones, three months of monthly ones,
/// so that several missed passes still leave every row a partition of its own time.
const DAYS_AHEAD: i64 = 7;
const MONTHS_AHEAD: u32 = 3;
/// Event partitions span a day while events are kept up to this long, a month beyond
/// (so that a feed read, which looks into every partition, looks into a few dozen at most).
const DAILY_EVENTS_UP_TO: chrono::Duration = chrono::Duration::days(31);
/// At most this many partitions dropped per table and pass (a bound on the loop; a pass
/// normally drops one or none).
const MAX_DROPS: usize = 1000;

/// One pass: the partitions ahead of `now`, then what is past `retention` (events) and
/// `attempt_retention_days` (attempts; 0 keeps them).
pub async fn run(db: Db, now: DateTime<Utc>, retention: Duration, attempt_retention_days: u32) {
    // The configuration bounds the retention to a year: always representable.
    let retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
    let db = &db;
    if let Err(error) = make_partitions(db, now, retention).await {
        tracing::warn!(error = %error.summary(), "cannot make the history's partitions ahead; rows outside them go to the DEFAULT partitions meanwhile");
    }
    match now.checked_sub_signed(retention) {
        Some(cutoff) => report("delivery events", prune(db, cutoff).await),
        None => tracing::error!("the event retention reaches before any time; nothing pruned"),
    }
    if attempt_retention_days > 0 {
        let age = chrono::Duration::try_days(i64::from(attempt_retention_days));
        match age.and_then(|age| now.checked_sub_signed(age)) {
            Some(cutoff) => report(
                "delivery attempts",
                prune_history(db, HistoryTable::Attempts, cutoff).await,
            ),
            None => {
                tracing::error!("the attempt retention reaches before any time; nothing pruned")
            }
        }
    }
}

fn report(table: &'static str, pruned: Result<Pruned, DbError>) {
    match pruned {
        Ok(pruned) if pruned.partitions.is_empty() && pruned.rows == 0 => {}
        Ok(pruned) => tracing::info!(
            table,
            partitions = ?pruned.partitions,
            rows = pruned.rows,
            "dropped the history's partitions past retention"
        ),
        Err(error) => {
            tracing::warn!(table, error = %error.summary(), "cannot prune the history; the next pass tries again")
        }
    }
}

/// The span of an event partition for a retention of `retention`.
fn event_span(retention: chrono::Duration) -> PartitionSpan {
    if retention <= DAILY_EVENTS_UP_TO {
        PartitionSpan::Day
    } else {
        PartitionSpan::Month
    }
}

/// Makes the partitions of the days (events) and months (attempts) ahead of `now` that do
/// not exist yet (idempotent: every worker may run it).
pub async fn make_partitions(
    db: &Db,
    now: DateTime<Utc>,
    event_retention: chrono::Duration,
) -> Result<(), DbError> {
    let span = event_span(event_retention);
    let events_until = match span {
        PartitionSpan::Day => now.checked_add_signed(chrono::Duration::days(DAYS_AHEAD)),
        PartitionSpan::Month => now.checked_add_months(chrono::Months::new(MONTHS_AHEAD)),
    };
    let attempts_until = now.checked_add_months(chrono::Months::new(MONTHS_AHEAD));
    for (table, span, until) in [
        (HistoryTable::Events, span, events_until),
        (HistoryTable::Attempts, PartitionSpan::Month, attempts_until),
    ] {
        // Only a clock at the end of time has no time ahead.
        let Some(until) = until else { continue };
        let made = db
            .run(async |conn| history::make_partitions(conn, table, span, now, until).await)
            .await?;
        if made > 0 {
            tracing::info!(
                table = table.name(),
                made,
                "made the history's partitions ahead"
            );
        }
    }
    Ok(())
}

/// What pruning removed: whole partitions, and rows of the DEFAULT partition.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub partitions: Vec<String>,
    pub rows: i64,
}

/// Drops every event partition wholly before `cutoff`, and deletes the events before it
/// that the DEFAULT partition caught.
pub async fn prune(db: &Db, cutoff: DateTime<Utc>) -> Result<Pruned, DbError> {
    prune_history(db, HistoryTable::Events, cutoff).await
}

/// Drops every partition of `table` wholly before `cutoff` that may go, and deletes the
/// rows before it that its DEFAULT partition caught, a batch per statement.
pub async fn prune_history(
    db: &Db,
    table: HistoryTable,
    cutoff: DateTime<Utc>,
) -> Result<Pruned, DbError> {
    let mut pruned = Pruned::default();
    for _ in 0..MAX_DROPS {
        let dropped = db
            .run(async |conn| history::drop_partition(conn, table, cutoff).await)
            .await?;
        match dropped {
            Some(name) => pruned.partitions.push(name),
            None => break,
        }
    }
    loop {
        let rows = db
            .run(async |conn| history::prune_default(conn, table, cutoff, PRUNE_BATCH).await)
            .await?;
        pruned.rows += rows;
        if rows < PRUNE_BATCH {
            return Ok(pruned);
        }
    }
}
