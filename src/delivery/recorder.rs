//! Batched recording: attempts whose requests finish close together are recorded by one
//! statement (db/sql/record_attempts.sql), each under its own claim-token fence.
//!
//! A worker's request tasks hand their results here; the writer task takes whatever has
//! queued the moment it is free (no timer: a lone result is recorded at once), at most
//! [`MAX_BATCH`] and at most one attempt per delivery per batch (a second one for the same
//! delivery, a late worker's say, waits for the next batch, so the attempt numbers come
//! from the row as the first left it). If a batch's statement fails for a reason other than
//! the database's reach, its attempts are recorded again one by one, so one bad row cannot
//! fail the others. The writer ends when the worker that owns this recorder is gone.
//!
//! One writer, not two: a statement's cost is mostly its own (executor start-up, the
//! table's checks, triggers), not its rows', and two writers split the same results into
//! batches half as large. With one hot destination, two writers recorded about 2.4
//! attempts a statement and one about 4, at about two thirds of the database's CPU per
//! delivery (docs/BENCHMARKS.md, "Slots handed on").
//!
//! Handing slots on: an attempt whose task asks for it (`hand_on`: its worker has free
//! slots, so no other destination is waiting for this one) and that moved its delivery
//! out of `processing` hands its request slot on to the next due delivery of the same
//! destination, claimed in the transaction that records the attempt (db/sql/hand_on.sql,
//! migration hand_on_slots). The task sends that delivery next in the same slot: for a
//! busy destination, one commit per delivery instead of two, and no claim loop between
//! one request and the next. Under a full worker (no free slot) nothing is handed on and
//! every freed slot goes back to the claim loop, which shares slots among destinations
//! by turn.
//!
//! After a batch is committed and answered, the writer keeps each destination's run of
//! failed deliveries (db/destinations.rs `count_failed_deliveries`: a delivery ending
//! `failed` adds one, a delivered one starts the run again) and pauses a destination whose
//! receiver answered `410 Gone` or whose run reached `FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES`
//! (pausing.rs). That is a transaction of its own, on a task of its own, only for batches
//! with a failure, a 410 or a delivery to a destination whose run was nonzero when it was
//! claimed: the common batch (all delivered, no run) costs nothing more. A crash between
//! the two loses that batch's share of the count, no more.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use tokio::sync::{mpsc, oneshot};

use super::pausing;
use crate::clock::Clock;
use crate::db::destinations::{FailureRun, FailureThresholds, Switch};
use crate::db::models::ClaimedDelivery;
use crate::db::queue::{self, AttemptRecord, OwnerTransition, Recorded, SlotsHandedOn};
use crate::db::{Db, DbError};
use crate::model::ids::{AttemptId, ClaimToken, DeliveryId, DestinationId};
use crate::model::state::{AttemptOutcome, DeliveryState, DestinationKind, PauseReason};
use crate::telemetry::meters;

/// The most attempts one statement records.
pub const MAX_BATCH: usize = 32;

/// One attempt, owned, as the request task hands it over.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub attempt_id: AttemptId,
    pub delivery_id: DeliveryId,
    pub claim_token: ClaimToken,
    pub destination_url: String,
    pub attempted_at: DateTime<Utc>,
    pub duration_ms: i32,
    pub outcome: AttemptOutcome,
    pub response_status: Option<i32>,
    pub error: Option<String>,
    pub reply: Option<String>,
    pub transition: OwnerTransition,
    pub destination_id: DestinationId,
    pub destination_kind: DestinationKind,
    /// The destination's run of failed deliveries was nonzero when this was claimed.
    pub destination_had_failures: bool,
    /// Whether the task takes the next due delivery of the destination into its slot.
    pub hand_on: bool,
}

impl Attempt {
    fn record(&self) -> AttemptRecord<'_> {
        AttemptRecord {
            attempt_id: &self.attempt_id,
            delivery_id: &self.delivery_id,
            claim_token: &self.claim_token,
            destination_url: &self.destination_url,
            attempted_at: self.attempted_at,
            duration_ms: self.duration_ms,
            outcome: self.outcome,
            response_status: self.response_status,
            error: self.error.as_deref(),
            reply: self.reply.as_deref(),
        }
    }
}

/// How an attempt was recorded and, when its slot was handed on, the delivery claimed
/// into it.
#[derive(Debug)]
pub struct Written {
    pub recorded: Recorded,
    pub next: Option<ClaimedDelivery>,
}

type Answer = Result<Written, Arc<DbError>>;

/// What a slot handed on claims with: the worker's lease and per-destination cap.
#[derive(Debug, Clone, Copy)]
pub struct HandOnSettings {
    pub lease: std::time::Duration,
    pub destination_concurrency: u32,
}

struct Job {
    attempt: Attempt,
    reply: oneshot::Sender<Answer>,
}

pub struct Recorder {
    sender: mpsc::Sender<Job>,
}

impl Recorder {
    /// Starts the writer (on the current runtime). `thresholds`: the runs of failed
    /// deliveries that warn of and pause a destination.
    pub fn start(
        db: Db,
        clock: Arc<dyn Clock>,
        thresholds: FailureThresholds,
        hand_on: HandOnSettings,
    ) -> Recorder {
        let (sender, receiver) = mpsc::channel(1024);
        tokio::spawn(write_batches(db, clock, receiver, thresholds, hand_on));
        Recorder { sender }
    }

    /// Records `attempt` with whatever else is queued; answers once it is committed.
    pub async fn record(&self, attempt: Attempt) -> Answer {
        let (reply, answer) = oneshot::channel();
        let gone = || Arc::new(DbError::Pool("the attempt recorder has stopped".into()));
        self.sender
            .send(Job { attempt, reply })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

async fn write_batches(
    db: Db,
    clock: Arc<dyn Clock>,
    mut receiver: mpsc::Receiver<Job>,
    thresholds: FailureThresholds,
    hand_on: HandOnSettings,
) {
    // Attempts for a delivery already in the batch, kept for the next one.
    let mut deferred: Vec<Job> = Vec::new();
    loop {
        let mut batch: Vec<Job> = Vec::new();
        let mut deliveries = HashSet::new();
        for job in std::mem::take(&mut deferred) {
            if deliveries.insert(job.attempt.delivery_id.clone()) {
                batch.push(job);
            } else {
                deferred.push(job);
            }
        }
        if batch.is_empty() {
            // Every sender gone: the worker has stopped.
            let Some(first) = receiver.recv().await else {
                return;
            };
            deliveries.insert(first.attempt.delivery_id.clone());
            batch.push(first);
        }
        while batch.len() < MAX_BATCH {
            let Ok(job) = receiver.try_recv() else { break };
            if deliveries.insert(job.attempt.delivery_id.clone()) {
                batch.push(job);
            } else {
                deferred.push(job);
            }
        }
        let (attempts, answers) = write_batch(&db, clock.pinned(), hand_on, batch).await;
        let (runs, gone) = destination_effects(&attempts, &answers);
        if !runs.is_empty() || !gone.is_empty() {
            // On a task of its own: a pause may wait for an endpoint's row lock (a long
            // erase, say), and recording must not wait with it.
            let (task_db, task_clock) = (db.clone(), clock.clone());
            tokio::spawn(async move {
                follow_destinations(&task_db, task_clock.as_ref(), thresholds, runs, gone).await;
            });
        }
    }
}

/// Writes one batch and answers each request task; hands back what was recorded.
async fn write_batch(
    db: &Db,
    now: Option<DateTime<Utc>>,
    hand_on: HandOnSettings,
    batch: Vec<Job>,
) -> (Vec<Attempt>, Vec<Option<Recorded>>) {
    let (attempts, replies): (Vec<Attempt>, Vec<_>) = batch
        .into_iter()
        .map(|job| (job.attempt, job.reply))
        .unzip();
    let rows: Vec<(AttemptRecord<'_>, OwnerTransition)> = attempts
        .iter()
        .map(|a| (a.record(), a.transition))
        .collect();
    let written = if attempts.iter().any(|a| a.hand_on) {
        db.run(async |conn| {
            Ok(conn
                .transaction::<_, DbError, _>(async |conn| {
                    let recorded = queue::record_attempts(conn, &rows, now).await?;
                    let handed = slots_handed_on(&attempts, &recorded);
                    let claimed = if handed.is_empty() {
                        Vec::new()
                    } else {
                        queue::hand_on(
                            conn,
                            now,
                            hand_on.lease,
                            hand_on.destination_concurrency,
                            &handed,
                        )
                        .await?
                    };
                    Ok((recorded, claimed))
                })
                .await)
        })
        .await
    } else {
        db.run(async |conn| {
            Ok(queue::record_attempts(conn, &rows, now)
                .await
                .map(|recorded| (recorded, Vec::new())))
        })
        .await
    };
    let answers: Vec<Answer> = match written {
        Ok(Ok((recorded, claimed))) => {
            let mut answers: Vec<Answer> = recorded.into_iter().map(found).collect();
            let unplaced = place_successors(&attempts, &mut answers, claimed);
            if !unplaced.is_empty() {
                // Never more than the slots handed on; should it happen, they go back.
                super::handoff::hand_back(db, unplaced.iter().map(ClaimedDelivery::claim)).await;
            }
            answers
        }
        Ok(Err(error @ DbError::Query(_))) if rows.len() > 1 => {
            // The summary, not the driver's message, which may quote a value.
            tracing::warn!(error = %error.summary(), size = rows.len(), "a batch of attempts failed; recording them one by one");
            let mut answers = Vec::with_capacity(rows.len());
            for row in &rows {
                let one = db
                    .run(async |conn| {
                        queue::record_attempts(conn, std::slice::from_ref(row), now).await
                    })
                    .await;
                answers.push(match one {
                    Ok(mut recorded) => found(recorded.pop().flatten()),
                    Err(error) => Err(Arc::new(error)),
                });
            }
            answers
        }
        Ok(Err(error)) | Err(error) => {
            let error = Arc::new(error);
            rows.iter().map(|_| Err(error.clone())).collect()
        }
    };
    let recorded = answers
        .iter()
        .map(|a| a.as_ref().ok().map(|written| written.recorded.clone()))
        .collect();
    for (reply, answer) in replies.into_iter().zip(answers) {
        let _ = reply.send(answer);
    }
    (attempts, recorded)
}

/// The slots a recorded batch hands on: one per attempt that asked to and moved its
/// delivery out of `processing` (an owner's; a late worker's attempt frees no slot of
/// its destination).
fn slots_handed_on(attempts: &[Attempt], recorded: &[Option<Recorded>]) -> SlotsHandedOn {
    let mut handed = SlotsHandedOn::default();
    for (attempt, recorded) in attempts.iter().zip(recorded) {
        if attempt.hand_on && matches!(recorded, Some(Recorded::Owner { .. })) {
            handed.add(&attempt.destination_id);
        }
    }
    handed
}

/// Gives each attempt that handed its slot on a delivery claimed for its destination, in
/// batch order; answers what no attempt took.
fn place_successors(
    attempts: &[Attempt],
    answers: &mut [Answer],
    mut claimed: Vec<ClaimedDelivery>,
) -> Vec<ClaimedDelivery> {
    if claimed.is_empty() {
        return claimed;
    }
    meters::deliveries_claimed("hand_on", claimed.len());
    for (attempt, answer) in attempts.iter().zip(answers.iter_mut()) {
        let Ok(written) = answer else { continue };
        if !attempt.hand_on || !matches!(written.recorded, Recorded::Owner { .. }) {
            continue;
        }
        if let Some(at) = claimed
            .iter()
            .position(|c| c.destination_id == attempt.destination_id)
        {
            written.next = Some(claimed.remove(at));
        }
    }
    claimed
}

/// What a recorded batch means for its destinations: each one's run of failed
/// deliveries, in batch order (a delivered one restarts it, when it may be nonzero), and
/// the destinations whose receiver answered 410 (an owner's or a late worker's answer
/// alike).
fn destination_effects(
    attempts: &[Attempt],
    recorded: &[Option<Recorded>],
) -> (Vec<FailureRun>, Vec<DestinationId>) {
    let mut runs: Vec<FailureRun> = Vec::new();
    let mut gone: Vec<DestinationId> = Vec::new();
    for (attempt, recorded) in attempts.iter().zip(recorded) {
        let Some(recorded) = recorded else { continue };
        // A 410 is a webhook receiver's word (an SMTP server's reply codes are no HTTP
        // status). An autoresponder's failures are its submitters' addresses, not its
        // own state: they never pause it, or a bot naming bad addresses could.
        match attempt.destination_kind {
            DestinationKind::Webhook => {
                if attempt.response_status == Some(410) && !gone.contains(&attempt.destination_id) {
                    gone.push(attempt.destination_id.clone());
                }
            }
            DestinationKind::Email => {}
            DestinationKind::Autoresponder => continue,
        }
        let Recorded::Owner { state, .. } = recorded else {
            continue;
        };
        let at = match runs
            .iter()
            .position(|r| r.destination_id == attempt.destination_id)
        {
            Some(at) => at,
            None => {
                runs.push(FailureRun {
                    destination_id: attempt.destination_id.clone(),
                    restarted: false,
                    failed: 0,
                });
                runs.len() - 1
            }
        };
        let run = &mut runs[at];
        match state {
            DeliveryState::Failed => run.failed += 1,
            DeliveryState::Delivered => {
                run.failed = 0;
                run.restarted |= attempt.destination_had_failures;
            }
            DeliveryState::Pending | DeliveryState::Processing => {}
        }
    }
    runs.retain(|run| run.failed > 0 || run.restarted);
    (runs, gone)
}

/// Keeps the runs of failed deliveries and pauses the destinations a batch says to.
async fn follow_destinations(
    db: &Db,
    clock: &dyn Clock,
    thresholds: FailureThresholds,
    mut runs: Vec<FailureRun>,
    gone: Vec<DestinationId>,
) {
    // In id order, as the statement locks them.
    runs.sort_by(|a, b| a.destination_id.as_str().cmp(b.destination_id.as_str()));
    let mut pauses: Vec<(DestinationId, PauseReason)> = gone
        .into_iter()
        .map(|destination| (destination, PauseReason::Gone))
        .collect();
    if !runs.is_empty() {
        match db
            .run(async |conn| {
                let now = clock.now();
                crate::db::destinations::count_failed_deliveries(conn, &runs, thresholds, now).await
            })
            .await
        {
            Ok(reached) => pauses.extend(
                reached
                    .into_iter()
                    .filter(|destination| !pauses.iter().any(|(p, _)| p == destination))
                    .map(|destination| (destination, PauseReason::FailureThreshold))
                    .collect::<Vec<_>>(),
            ),
            Err(error) => {
                tracing::warn!(error = %error.summary(), "could not count failed deliveries for their destinations")
            }
        }
    }
    for (destination, reason) in pauses {
        if let Err(error) =
            pausing::switch_destination(db, &destination, Switch::Pause(reason), clock.now()).await
        {
            tracing::warn!(destination_id = %destination, reason = reason.as_str(), error = %error.summary(), "could not pause a destination");
        }
    }
}

/// A missing row: the delivery is gone (its endpoint was erased, cancelling what it owed,
/// while the request was in flight), reported as the single statement reported it.
fn found(recorded: Option<Recorded>) -> Answer {
    recorded
        .map(|recorded| Written {
            recorded,
            next: None,
        })
        .ok_or_else(|| Arc::new(DbError::Query(diesel::result::Error::NotFound)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A destination id named by a few hex digits.
    fn destination(name: &str) -> DestinationId {
        DestinationId::parse(&format!("dst_{name:0<32}")).unwrap()
    }

    fn attempt(endpoint: &str, status: Option<i32>, had_failures: bool) -> Attempt {
        Attempt {
            attempt_id: AttemptId::generate(),
            delivery_id: DeliveryId::generate(),
            claim_token: ClaimToken::generate(),
            destination_url: "https://receiver.example/".into(),
            attempted_at: Utc::now(),
            duration_ms: 1,
            outcome: AttemptOutcome::HttpError,
            response_status: status,
            error: None,
            reply: None,
            transition: OwnerTransition::Failed,
            destination_id: destination(endpoint),
            destination_kind: DestinationKind::Webhook,
            destination_had_failures: had_failures,
            hand_on: false,
        }
    }

    fn owner(state: DeliveryState) -> Option<Recorded> {
        Some(Recorded::Owner {
            attempt_number: 1,
            state,
        })
    }

    #[test]
    fn runs_count_failures_after_the_last_delivery_and_gone_is_any_410() {
        let attempts = [
            attempt("aaa", Some(500), false),
            attempt("aaa", Some(200), true),
            attempt("aaa", Some(400), false),
            attempt("bbb", Some(200), false),
            attempt("ccc", Some(410), false),
            attempt("ddd", Some(410), false),
            attempt("eee", Some(500), false),
        ];
        let recorded = [
            owner(DeliveryState::Failed),
            owner(DeliveryState::Delivered),
            owner(DeliveryState::Failed),
            owner(DeliveryState::Delivered),
            owner(DeliveryState::Failed),
            Some(Recorded::Late {
                attempt_number: 3,
                state: DeliveryState::Pending,
            }),
            // Not recorded: it counts for nothing.
            None,
        ];
        let (runs, gone) = destination_effects(&attempts, &recorded);
        let id = destination;
        assert_eq!(
            runs,
            vec![
                FailureRun {
                    destination_id: id("aaa"),
                    restarted: true,
                    failed: 1
                },
                FailureRun {
                    destination_id: id("ccc"),
                    restarted: false,
                    failed: 1
                },
            ]
        );
        assert_eq!(gone, vec![id("ccc"), id("ddd")]);
    }
}
