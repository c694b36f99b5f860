//! The worker's statements: claiming due deliveries, recording attempts under the
//! claim-token fence, ending or handing back claims, and how long until something is due.
//! Times that decide (due, lease, completion) are the database's unless a test pins them.

use chrono::{DateTime, Utc};
use diesel::pg::data_types::PgInterval;
use diesel::sql_types::{
    Array, BigInt, Bool, Integer, Interval, Json, Jsonb, Nullable, Text, Timestamptz,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::ClaimedDelivery;
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::{AttemptId, ClaimToken, DeliveryId, DestinationId};
use crate::model::state::{AttemptOutcome, DeliveryState, DestinationKind};

/// Public for the benchmarks, which run it through pgbench.
pub static CLAIM: SqlText = sql!("claim.sql", "claim_take.sql", "write_events.sql");
struct Claim;

/// What a claim asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest {
    /// `None`: the database's clock decides what is due and when leases end.
    pub now: Option<DateTime<Utc>>,
    pub lease: std::time::Duration,
    pub limit: u32,
    /// Requests in flight allowed per destination (unless it sets its own), across every
    /// process.
    pub destination_concurrency: u32,
}

/// The SQL types of a [`ClaimedDelivery`], in its column order: what the claim answers.
pub type ClaimedDeliverySql = (
    Text,
    Text,
    Text,
    Text,
    Text,
    Text,
    Nullable<Text>,
    Nullable<Text>,
    Integer,
    Nullable<Timestamptz>,
    Nullable<Json>,
    Nullable<Text>,
    Nullable<Text>,
    Integer,
    Nullable<Text>,
    Nullable<Text>,
    Nullable<Text>,
    Nullable<Text>,
    Bool,
    ReceiverOptionsSql,
    Nullable<Text>,
);

/// The SQL types of [`ReceiverOptions`](super::models::ReceiverOptions), in its order.
type ReceiverOptionsSql = (
    Text,
    Nullable<Text>,
    Nullable<Jsonb>,
    Nullable<Jsonb>,
    Nullable<Jsonb>,
    Nullable<Text>,
    Nullable<Text>,
    Nullable<Text>,
    Nullable<Text>,
    Nullable<Jsonb>,
);

/// The scheme an email delivery's snapshot captures its recipients under
/// (`destination_snapshot_url` in the migrations: `mailto:` and the addresses, by commas).
const MAILTO: &str = "mailto:";

impl ClaimedDelivery {
    /// An email delivery's recipients, decoded from its snapshot; none for another kind.
    pub fn recipients(&self) -> Vec<String> {
        if self.kind != DestinationKind::Email {
            return Vec::new();
        }
        self.destination_url
            .strip_prefix(MAILTO)
            .map(|list| {
                list.split(',')
                    .filter(|address| !address.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Claims up to `limit` due deliveries in one statement (claim.sql).
pub async fn claim(
    conn: &mut AsyncPgConnection,
    request: ClaimRequest,
) -> Result<Vec<ClaimedDelivery>, DbError> {
    let query = Statement::<Claim, ClaimedDeliverySql, _>::new(
        &CLAIM,
        (
            bind::<Nullable<Timestamptz>, _>(request.now),
            bind::<Interval, _>(interval(request.lease)),
            bind::<Integer, _>(clamp_i32(request.limit)),
            bind::<Integer, _>(clamp_i32(request.destination_concurrency)),
        ),
    );
    Ok(query.load(conn).await?)
}

static HAND_ON: SqlText = sql!("hand_on.sql", "claim_take.sql", "write_events.sql");
struct HandOn;

/// Request slots being handed on, by destination: the attempts just recorded (in the
/// same transaction) that took a delivery of it out of `processing`.
#[derive(Debug, Clone, Default)]
pub struct SlotsHandedOn {
    pub destinations: Vec<DestinationId>,
    pub slots: Vec<i32>,
}

impl SlotsHandedOn {
    pub fn add(&mut self, destination: &DestinationId) {
        match self.destinations.iter().position(|d| d == destination) {
            Some(at) => self.slots[at] += 1,
            None => {
                self.destinations.push(destination.clone());
                self.slots.push(1);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.destinations.is_empty()
    }
}

/// Claims the next due deliveries of the destinations whose slots are handed on
/// (hand_on.sql), at most one per slot, within each destination's cap. Runs in the
/// transaction that recorded the attempts that freed the slots. `destination_concurrency`:
/// requests in flight allowed per destination (unless it sets its own).
pub async fn hand_on(
    conn: &mut AsyncPgConnection,
    now: Option<DateTime<Utc>>,
    lease: std::time::Duration,
    destination_concurrency: u32,
    handed: &SlotsHandedOn,
) -> Result<Vec<ClaimedDelivery>, DbError> {
    let query = Statement::<HandOn, ClaimedDeliverySql, _>::new(
        &HAND_ON,
        (
            bind::<Nullable<Timestamptz>, _>(now),
            bind::<Interval, _>(interval(lease)),
            bind::<Integer, _>(clamp_i32(destination_concurrency)),
            bind::<Array<Text>, _>(
                handed
                    .destinations
                    .iter()
                    .map(DestinationId::as_str)
                    .collect::<Vec<_>>(),
            ),
            bind::<Array<Integer>, _>(handed.slots.as_slice()),
        ),
    );
    Ok(query.load(conn).await?)
}

fn clamp_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// A duration as a PostgreSQL interval (microseconds; saturating far beyond any setting).
pub fn interval(duration: std::time::Duration) -> PgInterval {
    PgInterval::from_microseconds(i64::try_from(duration.as_micros()).unwrap_or(i64::MAX))
}

/// One attempt to record.
#[derive(Debug, Clone)]
pub struct AttemptRecord<'a> {
    pub attempt_id: &'a AttemptId,
    pub delivery_id: &'a DeliveryId,
    pub claim_token: &'a ClaimToken,
    pub destination_url: &'a str,
    pub attempted_at: DateTime<Utc>,
    pub duration_ms: i32,
    pub outcome: AttemptOutcome,
    pub response_status: Option<i32>,
    pub error: Option<&'a str>,
    /// An email attempt's SMTP reply text.
    pub reply: Option<&'a str>,
}

/// The delivery's state after the owner's attempt. The owner decides it from the cycle
/// count it claimed with: while a worker holds the token nobody else changes that count
/// (late workers leave it alone, and only failed deliveries can be replayed). Times are
/// the database's, so every process schedules by the same clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerTransition {
    Delivered,
    /// Pending again, due this long after the attempt is recorded.
    Retry {
        after: std::time::Duration,
    },
    Failed,
}

/// How an attempt was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The row still carried this worker's token: counters raised, claim cleared, state moved.
    Owner {
        attempt_number: i32,
        state: DeliveryState,
    },
    /// The claim had been superseded: only the attempt and `attempts` were recorded.
    Late {
        attempt_number: i32,
        state: DeliveryState,
    },
}

/// Public for the benchmarks, which run it through pgbench.
pub static RECORD_ATTEMPTS: SqlText = sql!("record_attempts.sql", with_events);
struct RecordAttempts;

/// Records one attempt and, for the owner, the transition (a batch of one). Test seam:
/// the service records through the recorder's batches.
#[cfg(any(test, feature = "testing"))]
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    record: &AttemptRecord<'_>,
    transition: OwnerTransition,
    now: Option<DateTime<Utc>>,
) -> Result<Recorded, DbError> {
    record_attempts(conn, &[(record.clone(), transition)], now)
        .await?
        .pop()
        .flatten()
        .ok_or(DbError::Query(diesel::result::Error::NotFound))
}

/// Records a batch of attempts, at most one per delivery, each with its owner's
/// transition, in one statement (record_attempts.sql). One answer per attempt, in order:
/// `None` when no delivery has its id.
pub async fn record_attempts(
    conn: &mut AsyncPgConnection,
    batch: &[(AttemptRecord<'_>, OwnerTransition)],
    now: Option<DateTime<Utc>>,
) -> Result<Vec<Option<Recorded>>, DbError> {
    let (states, waits): (Vec<&str>, Vec<Option<PgInterval>>) = batch
        .iter()
        .map(|(_, transition)| match transition {
            OwnerTransition::Delivered => (DeliveryState::Delivered.as_str(), None),
            OwnerTransition::Retry { after } => {
                (DeliveryState::Pending.as_str(), Some(interval(*after)))
            }
            OwnerTransition::Failed => (DeliveryState::Failed.as_str(), None),
        })
        .unzip();
    let rows: Vec<(DeliveryId, i32, bool, DeliveryState)> =
        Statement::<RecordAttempts, (Text, Integer, Bool, Text), _>::new(
            &RECORD_ATTEMPTS,
            (
                bind::<Array<Text>, _>(
                    batch
                        .iter()
                        .map(|(r, _)| r.claim_token.as_str())
                        .collect::<Vec<_>>(),
                ),
                bind::<Array<Text>, _>(
                    batch
                        .iter()
                        .map(|(r, _)| r.delivery_id.as_str())
                        .collect::<Vec<_>>(),
                ),
                bind::<Array<Text>, _>(
                    batch
                        .iter()
                        .map(|(r, _)| r.attempt_id.as_str())
                        .collect::<Vec<_>>(),
                ),
                bind::<Array<Text>, _>(
                    batch
                        .iter()
                        .map(|(r, _)| r.destination_url)
                        .collect::<Vec<_>>(),
                ),
                bind::<Array<Timestamptz>, _>(
                    batch
                        .iter()
                        .map(|(r, _)| r.attempted_at)
                        .collect::<Vec<_>>(),
                ),
                bind::<Array<Text>, _>(
                    batch
                        .iter()
                        .map(|(r, _)| r.outcome.as_str())
                        .collect::<Vec<_>>(),
                ),
                bind::<Array<Nullable<Integer>>, _>(
                    batch
                        .iter()
                        .map(|(r, _)| r.response_status)
                        .collect::<Vec<_>>(),
                ),
                bind::<Array<Nullable<Text>>, _>(
                    batch.iter().map(|(r, _)| r.error).collect::<Vec<_>>(),
                ),
                bind::<Array<Integer>, _>(
                    batch.iter().map(|(r, _)| r.duration_ms).collect::<Vec<_>>(),
                ),
                bind::<Array<Text>, _>(states),
                bind::<Array<Nullable<Interval>>, _>(waits),
                bind::<Nullable<Timestamptz>, _>(now),
                bind::<Array<Nullable<Text>>, _>(
                    batch.iter().map(|(r, _)| r.reply).collect::<Vec<_>>(),
                ),
            ),
        )
        .load(conn)
        .await?;
    Ok(batch
        .iter()
        .map(|(record, _)| {
            rows.iter()
                .find(|(id, _, _, _)| id == record.delivery_id)
                .map(|(_, attempt_number, owner, state)| {
                    let (attempt_number, state) = (*attempt_number, *state);
                    if *owner {
                        Recorded::Owner {
                            attempt_number,
                            state,
                        }
                    } else {
                        Recorded::Late {
                            attempt_number,
                            state,
                        }
                    }
                })
        })
        .collect())
}

static FAIL_WITHOUT_ATTEMPT: SqlText = sql!("fail_without_attempt.sql", with_events);
struct FailWithoutAttempt;

/// Ends a claim without an attempt (fail_without_attempt.sql); whether the claim was
/// still this worker's.
pub async fn fail_without_attempt(
    conn: &mut AsyncPgConnection,
    delivery_id: &DeliveryId,
    claim_token: &ClaimToken,
    now: Option<DateTime<Utc>>,
) -> Result<bool, DbError> {
    let changed: i64 = Statement::<FailWithoutAttempt, BigInt, _>::new(
        &FAIL_WITHOUT_ATTEMPT,
        (
            bind::<Text, _>(delivery_id),
            bind::<Text, _>(claim_token),
            bind::<Nullable<Timestamptz>, _>(now),
        ),
    )
    .get_result(conn)
    .await?;
    Ok(changed > 0)
}

static HAND_BACK: SqlText = sql!("hand_back.sql", with_events);
struct HandBack;

/// Gives back claims whose requests never started (hand_back.sql), each only where the
/// claim is still its holder's; how many were.
pub async fn hand_back(
    conn: &mut AsyncPgConnection,
    claims: &[(&DeliveryId, &ClaimToken)],
) -> Result<usize, DbError> {
    let ids: Vec<&str> = claims.iter().map(|(id, _)| id.as_str()).collect();
    let tokens: Vec<&str> = claims.iter().map(|(_, token)| token.as_str()).collect();
    let (changed, _notified): (i64, i64) = Statement::<HandBack, (BigInt, BigInt), _>::new(
        &HAND_BACK,
        (bind::<Array<Text>, _>(ids), bind::<Array<Text>, _>(tokens)),
    )
    .get_result(conn)
    .await?;
    Ok(usize::try_from(changed).unwrap_or(0))
}

static NEXT_DUE: SqlText = sql!("next_due.sql");
struct NextDue;

/// How long until something not claimable now may become so (next_due.sql): `None` when
/// nothing is scheduled later.
pub async fn next_due_in(
    conn: &mut AsyncPgConnection,
    now: Option<DateTime<Utc>>,
) -> Result<Option<std::time::Duration>, DbError> {
    let wait: Option<PgInterval> = Statement::<NextDue, Nullable<Interval>, _>::new(
        &NEXT_DUE,
        (bind::<Nullable<Timestamptz>, _>(now),),
    )
    .get_result(conn)
    .await?;
    Ok(wait.map(|wait| {
        // No months in a difference of two times; days count as 24 hours.
        let micros = wait.microseconds + i64::from(wait.days) * 86_400_000_000;
        std::time::Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_snapshot_decodes_to_its_recipients_and_nothing_else_has_any() {
        let email =
            ClaimedDelivery::for_test(DestinationKind::Email, "mailto:a@example.com,b@example.com");
        assert_eq!(email.recipients(), ["a@example.com", "b@example.com"]);
        assert!(ClaimedDelivery::for_test(DestinationKind::Email, "mailto:")
            .recipients()
            .is_empty());
        let webhook = ClaimedDelivery::for_test(
            DestinationKind::Webhook,
            "https://mailto:x@receiver.example/",
        );
        assert!(webhook.recipients().is_empty());
    }
}
