//! What a read replica's monitor and the subscriptions' catch-up ask the two servers:
//! the primary's position in its write-ahead log, and how far a standby has replayed it
//! (sql/primary_wal_position.sql, sql/standby_replay.sql). Positions are bytes from the
//! start of the log (an LSN as a number), so they compare and subtract as integers.

use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::statement::{sql, SqlText, Statement};
use super::DbError;

/// A position in the primary's write-ahead log, in bytes from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WalPosition(pub i64);

/// The primary's insert position and its cluster's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryPosition {
    pub position: WalPosition,
    pub cluster: String,
}

/// Where a standby stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandbyState {
    /// In recovery: a standby. A server that is not (a promoted one, or a primary named by
    /// mistake) has no replay position to compare.
    pub standby: bool,
    pub replayed: Option<WalPosition>,
    /// Replay paused (`pg_wal_replay_pause()`): the lag grows as the primary writes.
    pub paused: bool,
    pub cluster: String,
}

static PRIMARY_POSITION: SqlText = sql!("primary_wal_position.sql");
struct ReadPrimaryPosition;
static STANDBY_REPLAY: SqlText = sql!("standby_replay.sql");
struct ReadStandbyReplay;

pub async fn primary_position(conn: &mut AsyncPgConnection) -> Result<PrimaryPosition, DbError> {
    let (position, cluster): (i64, String) =
        Statement::<ReadPrimaryPosition, (BigInt, Text), _>::new(&PRIMARY_POSITION, ())
            .get_result(conn)
            .await?;
    Ok(PrimaryPosition {
        position: WalPosition(position),
        cluster,
    })
}

pub async fn standby_state(conn: &mut AsyncPgConnection) -> Result<StandbyState, DbError> {
    let (standby, replayed, paused, cluster): (bool, Option<i64>, bool, String) =
        Statement::<ReadStandbyReplay, (Bool, Nullable<BigInt>, Bool, Text), _>::new(
            &STANDBY_REPLAY,
            (),
        )
        .get_result(conn)
        .await?;
    Ok(StandbyState {
        standby,
        replayed: replayed.map(WalPosition),
        paused,
        cluster,
    })
}
