//! The partitions of the history: the event log (`delivery_events`, by `occurred_at`) and
//! the attempt history (`delivery_attempts`, by `attempted_at`), made ahead and dropped
//! whole once past their retention (migration history_partitions; docs/data-model.md).

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;

/// A table of the history, partitioned by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryTable {
    Events,
    Attempts,
}

impl HistoryTable {
    pub fn name(self) -> &'static str {
        match self {
            HistoryTable::Events => "delivery_events",
            HistoryTable::Attempts => "delivery_attempts",
        }
    }
}

/// How much time one partition covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionSpan {
    Day,
    Month,
}

impl PartitionSpan {
    fn unit(self) -> &'static str {
        match self {
            PartitionSpan::Day => "day",
            PartitionSpan::Month => "month",
        }
    }
}

static MAKE_PARTITIONS: SqlText = sql!("history_make_partitions.sql");
struct MakePartitions;

/// Makes the partitions of `table` that cover `[from, until)`, a `span` each, where none
/// exists yet; returns how many.
pub async fn make_partitions(
    conn: &mut AsyncPgConnection,
    table: HistoryTable,
    span: PartitionSpan,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<i32, DbError> {
    Ok(Statement::<MakePartitions, Integer, _>::new(
        &MAKE_PARTITIONS,
        (
            bind::<Text, _>(table.name()),
            bind::<Text, _>(span.unit()),
            bind::<Timestamptz, _>(from),
            bind::<Timestamptz, _>(until),
        ),
    )
    .get_result(conn)
    .await?)
}

static DROP_PARTITION: SqlText = sql!("history_drop_partition.sql");
struct DropPartition;

/// Drops the oldest partition of `table` wholly before `before` that may go; returns its
/// name, or `None` when there is none.
pub async fn drop_partition(
    conn: &mut AsyncPgConnection,
    table: HistoryTable,
    before: DateTime<Utc>,
) -> Result<Option<String>, DbError> {
    Ok(Statement::<DropPartition, Nullable<Text>, _>::new(
        &DROP_PARTITION,
        (
            bind::<Text, _>(table.name()),
            bind::<Timestamptz, _>(before),
        ),
    )
    .get_result(conn)
    .await?)
}

static PRUNE_DEFAULT_EVENTS: SqlText = sql!("prune_default_events.sql");
struct PruneDefaultEvents;
static PRUNE_DEFAULT_ATTEMPTS: SqlText = sql!("prune_default_attempts.sql");
struct PruneDefaultAttempts;

/// Deletes up to `batch` rows of `table`'s DEFAULT partition from before `before`; returns
/// how many.
pub async fn prune_default(
    conn: &mut AsyncPgConnection,
    table: HistoryTable,
    before: DateTime<Utc>,
    batch: i64,
) -> Result<i64, DbError> {
    let binds = (bind::<Timestamptz, _>(before), bind::<BigInt, _>(batch));
    Ok(match table {
        HistoryTable::Events => {
            Statement::<PruneDefaultEvents, BigInt, _>::new(&PRUNE_DEFAULT_EVENTS, binds)
                .get_result(conn)
                .await?
        }
        HistoryTable::Attempts => {
            Statement::<PruneDefaultAttempts, BigInt, _>::new(&PRUNE_DEFAULT_ATTEMPTS, binds)
                .get_result(conn)
                .await?
        }
    })
}
