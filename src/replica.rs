//! The read replica (`FORMS_DATABASE_READ_URL`): a streaming standby of the primary that
//! takes the reads which may trail the primary a little, and the monitor that says, every
//! second, whether it may.
//!
//! Which reads: GraphQL query operations (listings, details, counts) and exports. Every
//! other database call stays on the primary: mutations (and what a mutation answers),
//! intake, the workers' claims, the management key lookups (a key revoked on the primary
//! must be refused at once, not after the standby has replayed the revocation),
//! idempotency, and the subscriptions (the event reader and what each event loads). A
//! subscription's catch-up (the history it reads after `afterEventId`, or after it fell
//! behind) reads the replica only when the replica has replayed the primary's log through
//! the position taken when the frontier it reads up to was fixed (`feed/`), checked as it
//! starts; otherwise it reads the primary.
//!
//! The lag: every second the monitor reads the primary's log position, then the
//! standby's replay position. The standby is caught up when it has replayed through the
//! primary's latest position; otherwise its lag is the time since the primary first stood
//! past what the standby has replayed. (`now() - pg_last_xact_replay_timestamp()` would
//! grow on an idle primary with nothing to replay.) While the lag is within
//! `FORMS_DATABASE_READ_MAX_LAG_SECONDS`, the server is a standby of the primary's
//! cluster, and it answers, reads go to it; otherwise to the primary, and every change is
//! logged once (never the URL).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::AsyncPgConnection;

use crate::config::{DatabaseConfig, ReadReplicaConfig};
use crate::db::replica::{self as statements, StandbyState, WalPosition};
use crate::db::{ConnectionSettings, Db, DbError};
use crate::telemetry::meters::{self, ReplicaRead};

/// The `application_name` of every connection to the replica, so that an operator tells
/// them apart on the standby (`pg_stat_activity`).
pub const APPLICATION_NAME: &str = "hymical-forms-read";

/// Primary positions kept while the standby has not replayed them: an hour of one a
/// second. Past that the oldest is kept (the lag stays exact) and the next oldest dropped.
const MAX_SAMPLES: usize = 3_600;

pub struct Replica {
    /// The standby's pool: GraphQL queries and subscriptions' catch-up.
    pub db: Db,
    /// For exports, which hold a connection of their own, and the monitor's connection.
    pub connection: ConnectionSettings,
    max_lag: Duration,
    call_timeout: Duration,
    /// The monitor's verdict: reads go to the replica.
    serving: AtomicBool,
    /// The monitor's last measurement found a standby of the primary's cluster (whatever
    /// its lag): a catch-up may ask it how far it has replayed.
    standby_of_primary: AtomicBool,
}

impl Replica {
    /// The replica's pool and settings; nothing is connected yet (a standby that is down
    /// at start-up leaves reads on the primary, it does not stop the service).
    pub fn open(read: &ReadReplicaConfig, database: &DatabaseConfig) -> Result<Replica, DbError> {
        let connection = ConnectionSettings::new(&read.url, database)?.named(APPLICATION_NAME);
        Ok(Replica {
            db: Db::lazy(connection.clone(), read.pool_size, database.call_timeout()),
            connection,
            max_lag: read.max_lag,
            call_timeout: database.call_timeout(),
            serving: AtomicBool::new(false),
            standby_of_primary: AtomicBool::new(false),
        })
    }

    /// Whether a read that may trail the primary goes to the replica now; counted by
    /// `read` and where it goes.
    pub fn serves(&self, read: ReplicaRead) -> bool {
        let serving = self.serving.load(Ordering::SeqCst);
        meters::replica_read(read, serving);
        serving
    }

    /// The monitor's verdict now, uncounted (tests wait for it).
    #[cfg(any(test, feature = "testing"))]
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    /// Where a subscription's catch-up up to a frontier reads: the replica's pool when it
    /// has replayed the primary's log through `position` (the primary's position when the
    /// frontier was fixed, so every event up to it and its delivery are there), asked now;
    /// else `primary`.
    pub async fn for_catch_up(&self, primary: &Db, position: WalPosition) -> Db {
        let replayed = self.standby_of_primary.load(Ordering::SeqCst)
            && self
                .db
                .run(async |conn| statements::standby_state(conn).await)
                .await
                // Unreachable or failing: the primary has it all.
                .is_ok_and(|state| state.standby && state.replayed >= Some(position));
        meters::replica_read(ReplicaRead::CatchUp, replayed);
        if replayed {
            self.db.clone()
        } else {
            primary.clone()
        }
    }
}

/// Why reads go where they go; a change is logged once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Serving,
    TooFarBehind { paused: bool },
    NotAStandby,
    OtherCluster,
    StandbyUnreachable(String),
    PrimaryUnreadable(String),
}

/// The `replica_lag` upkeep job: measures the lag every second and routes the reads by
/// it, keeping its own connection to the standby and the primary's recent positions.
pub struct Monitor {
    replica: Arc<Replica>,
    primary: Db,
    history: PrimaryHistory,
    standby: Option<AsyncPgConnection>,
    said: Option<Verdict>,
}

impl Monitor {
    pub fn new(replica: Arc<Replica>, primary: Db) -> Monitor {
        Monitor {
            replica,
            primary,
            history: PrimaryHistory::default(),
            standby: None,
            said: None,
        }
    }

    /// One turn: a measurement, and the reads routed by it.
    pub async fn measure_and_route(&mut self) {
        let (verdict, lag) = measure(
            &self.replica,
            &self.primary,
            &mut self.standby,
            &mut self.history,
        )
        .await;
        let serving = verdict == Verdict::Serving;
        self.replica.serving.store(serving, Ordering::SeqCst);
        meters::replica_measured(lag, serving);
        if self.said.as_ref() != Some(&verdict) {
            tell(&verdict, lag, self.replica.max_lag);
            self.said = Some(verdict);
        }
    }
}

/// One measurement: the verdict, and the lag (seconds, bytes) when it could be measured.
async fn measure(
    replica: &Replica,
    primary: &Db,
    standby: &mut Option<AsyncPgConnection>,
    history: &mut PrimaryHistory,
) -> (Verdict, Option<(Duration, u64)>) {
    // The primary first: a standby position read after it that has reached it is caught up.
    let primary_now = match primary
        .run(async |conn| statements::primary_position(conn).await)
        .await
    {
        Ok(position) => position,
        Err(error) => return (Verdict::PrimaryUnreadable(error.summary()), None),
    };
    history.primary_at(Instant::now(), primary_now.position);
    let state = match standby_state(replica, standby).await {
        Ok(state) => state,
        Err(error) => {
            replica.standby_of_primary.store(false, Ordering::SeqCst);
            return (Verdict::StandbyUnreachable(error.summary()), None);
        }
    };
    let replayed = match (state.standby, state.replayed) {
        (true, Some(replayed)) if state.cluster == primary_now.cluster => replayed,
        (true, _) => {
            replica.standby_of_primary.store(false, Ordering::SeqCst);
            return (Verdict::OtherCluster, None);
        }
        (false, _) => {
            replica.standby_of_primary.store(false, Ordering::SeqCst);
            return (Verdict::NotAStandby, None);
        }
    };
    replica.standby_of_primary.store(true, Ordering::SeqCst);
    let lag = history.lag(replayed, primary_now.position, Instant::now());
    let verdict = if lag.0 <= replica.max_lag {
        Verdict::Serving
    } else {
        Verdict::TooFarBehind {
            paused: state.paused,
        }
    };
    (verdict, Some(lag))
}

/// The standby's state on the monitor's own connection (opened again after a failure):
/// a busy read pool cannot delay the measurement that decides whether to use it.
async fn standby_state(
    replica: &Replica,
    standby: &mut Option<AsyncPgConnection>,
) -> Result<StandbyState, DbError> {
    let mut connection = match standby.take() {
        Some(connection) => connection,
        None => replica.connection.connect().await?,
    };
    let state = tokio::time::timeout(
        replica.call_timeout,
        statements::standby_state(&mut connection),
    )
    .await
    .map_err(|_| DbError::Deadline(replica.call_timeout))??;
    *standby = Some(connection);
    Ok(state)
}

fn tell(verdict: &Verdict, lag: Option<(Duration, u64)>, max_lag: Duration) {
    let lag_seconds = lag.map(|(seconds, _)| seconds.as_secs_f64());
    let max_lag_seconds = max_lag.as_secs_f64();
    match verdict {
        Verdict::Serving => tracing::info!(
            lag_seconds,
            max_lag_seconds,
            "read replica within its lag: reads that may trail go to it"
        ),
        Verdict::TooFarBehind { paused } => tracing::warn!(
            lag_seconds,
            max_lag_seconds,
            replay_paused = paused,
            "read replica past FORMS_DATABASE_READ_MAX_LAG_SECONDS: reads go to the primary"
        ),
        Verdict::NotAStandby => tracing::warn!(
            "FORMS_DATABASE_READ_URL names a server that is not in recovery (not a standby): reads go to the primary"
        ),
        Verdict::OtherCluster => tracing::warn!(
            "FORMS_DATABASE_READ_URL names a standby of another cluster than FORMS_DATABASE_URL's: reads go to the primary"
        ),
        Verdict::StandbyUnreachable(error) => tracing::warn!(
            error = %error,
            "cannot read the read replica's replay position: reads go to the primary"
        ),
        Verdict::PrimaryUnreadable(error) => tracing::warn!(
            error = %error,
            "cannot read the primary's log position, so the read replica's lag is unknown: reads go to the primary"
        ),
    }
}

/// The primary's positions the standby has not replayed yet, each with when it was first
/// seen.
#[derive(Default)]
struct PrimaryHistory {
    samples: VecDeque<(Instant, WalPosition)>,
}

impl PrimaryHistory {
    fn primary_at(&mut self, at: Instant, position: WalPosition) {
        if self
            .samples
            .back()
            .is_some_and(|(_, newest)| *newest >= position)
        {
            return;
        }
        if self.samples.len() >= MAX_SAMPLES {
            self.samples.remove(1);
        }
        self.samples.push_back((at, position));
    }

    /// The standby's lag when it has replayed through `replayed` and the primary stands
    /// at `primary`: the time since the primary was first seen past `replayed`, and the
    /// bytes between.
    fn lag(
        &mut self,
        replayed: WalPosition,
        primary: WalPosition,
        now: Instant,
    ) -> (Duration, u64) {
        while self
            .samples
            .front()
            .is_some_and(|(_, position)| *position <= replayed)
        {
            self.samples.pop_front();
        }
        let bytes = u64::try_from(primary.0.saturating_sub(replayed.0)).unwrap_or(0);
        match self.samples.front() {
            None => (Duration::ZERO, 0),
            Some((since, _)) => (now.saturating_duration_since(*since), bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_up_is_no_lag_however_long_the_primary_was_idle() {
        let start = Instant::now();
        let mut history = PrimaryHistory::default();
        for second in 0..10 {
            history.primary_at(start + Duration::from_secs(second), WalPosition(100));
            let lag = history.lag(
                WalPosition(100),
                WalPosition(100),
                start + Duration::from_secs(second),
            );
            assert_eq!(lag, (Duration::ZERO, 0));
        }
    }

    #[test]
    fn the_lag_counts_from_when_the_primary_first_stood_past_the_replay() {
        let start = Instant::now();
        let at = |second: u64| start + Duration::from_secs(second);
        let mut history = PrimaryHistory::default();
        history.primary_at(at(0), WalPosition(100));
        assert_eq!(
            history.lag(WalPosition(100), WalPosition(100), at(0)).0,
            Duration::ZERO
        );
        // Replay stops at 100 while the primary writes on.
        history.primary_at(at(1), WalPosition(150));
        history.primary_at(at(2), WalPosition(200));
        history.primary_at(at(3), WalPosition(200));
        assert_eq!(
            history.lag(WalPosition(100), WalPosition(200), at(3)),
            (Duration::from_secs(2), 100)
        );
        // Replay reaches 150: what remains was first seen at 2.
        assert_eq!(
            history.lag(WalPosition(150), WalPosition(200), at(4)),
            (Duration::from_secs(2), 50)
        );
        assert_eq!(
            history.lag(WalPosition(200), WalPosition(200), at(5)),
            (Duration::ZERO, 0)
        );
    }

    #[test]
    fn a_full_history_keeps_the_oldest_position_so_the_lag_stays_exact() {
        let start = Instant::now();
        let mut history = PrimaryHistory::default();
        for second in 0..(MAX_SAMPLES as u64 + 50) {
            history.primary_at(
                start + Duration::from_secs(second),
                WalPosition(1_000 + second as i64),
            );
        }
        assert_eq!(history.samples.len(), MAX_SAMPLES);
        let now = start + Duration::from_secs(MAX_SAMPLES as u64 + 50);
        let (seconds, _) = history.lag(WalPosition(0), WalPosition(5_000), now);
        assert_eq!(seconds, Duration::from_secs(MAX_SAMPLES as u64 + 50));
    }
}
