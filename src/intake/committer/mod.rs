//! Group commit for public intake: what the database must do for a submission (count it
//! against its rate limits, store it) is queued here, and a few writer tasks take
//! whatever has queued up as one batch and write it with one statement: its submissions,
//! deliveries and events, and as the last step its rate-limit counters, so in one
//! transaction and one WAL flush for all of them. Should a counter end over its limit,
//! that statement writes nothing, and the batch is counted on its own (both scopes, in the
//! order of the checks; the counters are unlogged, so that commit waits for no flush)
//! before what the limits let through is written.
//!
//! A writer takes what is queued the moment it is free, so an idle server writes each
//! submission at once, and under load batches grow by themselves to whatever arrived
//! while the previous ones were committing (at most [`MAX_BATCH`]). The only added wait is
//! [`GATHER_WINDOW`], and only while another writer's batch is in flight, which the new
//! batch would wait for anyway (at its counters or its commit), the new batch is small
//! and so have the queue's batches been of late ([`GATHER_UP_TO`]). Each
//! request still gets its own answer, and only after the commit that wrote it: a refusal
//! of one (a rate limit, an idempotency conflict) is that one's answer alone, and if the
//! batch statement fails for any reason but the database being unreachable, its
//! submissions are written again one by one, so one bad row cannot fail the others.
//!
//! Here: the queue and its writers, with the gather. The verdicts of the rate limits are
//! `limits.rs`; storing a batch and handing its deliveries to the worker, `store.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Accepted;
use crate::clock::Clock;
use crate::db::rate_limits::Counter;
use crate::db::submissions::NewSubmission;
use crate::db::{Db, DbError};
use crate::delivery::handoff::Handoff;
use crate::error::ApiError;
use crate::model::ids::{ClaimToken, DeliveryId};
use crate::telemetry::meters::{self};
use crate::telemetry::traces;

/// The most submissions one batch writes. Past this a batch's statement grows for little
/// gain (the flush is shared already), and its answers wait longer.
pub const MAX_BATCH: usize = 64;

/// How many batches may be committing at once, each on its own pooled connection.
pub const WRITERS: usize = 2;

/// Requests waiting for a writer at most; more wait to be queued (backpressure).
const QUEUE: usize = 4096;

mod limits;
mod store;

pub use limits::Counted;
use limits::OverLimit;
use store::{count_and_store, fail_all, give_back_lost, hand_over, Stored};

/// What a request turned into after the checks that need no database, in the order the
/// checks run (docs/intake.md): the per-source limit, then the endpoint (id and lookup),
/// then the per-endpoint limit, then everything else.
pub struct IntakeRequest {
    /// Counted against the per-source limit (rate limiting on).
    pub source: Option<Counted>,
    /// Steps 3–4: the endpoint was found, or why not.
    pub endpoint: Result<EndpointStage, ApiError>,
}

pub struct EndpointStage {
    /// Counted against the per-endpoint limit (rate limiting on).
    pub counted: Option<Counted>,
    /// Steps 6 on: what to do with it, or why it is refused.
    pub outcome: Result<Work, ApiError>,
}

pub enum Work {
    /// Store it.
    Store {
        submission: Box<NewSubmission>,
        field_count: usize,
    },
    /// Answer without storing (a tripped honeypot).
    Answer(Accepted),
}

impl IntakeRequest {
    /// The submission it would store, if it gets that far.
    fn submission_mut(&mut self) -> Option<&mut NewSubmission> {
        match &mut self.endpoint {
            Ok(EndpointStage {
                outcome: Ok(Work::Store { submission, .. }),
                ..
            }) => Some(submission),
            _ => None,
        }
    }

    /// The submission it would store, if it gets that far.
    fn submission(&self) -> Option<&NewSubmission> {
        match &self.endpoint {
            Ok(EndpointStage {
                outcome: Ok(Work::Store { submission, .. }),
                ..
            }) => Some(submission),
            _ => None,
        }
    }

    /// Its per-endpoint count, when its endpoint was found and rate limiting is on.
    fn endpoint_counted(&self) -> Option<&Counted> {
        self.endpoint
            .as_ref()
            .ok()
            .and_then(|stage| stage.counted.as_ref())
    }

    /// Its per-source and per-endpoint counters with their limits, where it is counted on
    /// them when within every limit.
    fn counters(&self) -> [Option<(Counter<'_>, u32)>; 2] {
        [self.source.as_ref(), self.endpoint_counted()]
            .map(|counted| counted.map(|counted| (counted.counter(), counted.limit.requests)))
    }

    /// Whether it is counted against a limit (rate limiting on).
    fn counts(&self) -> bool {
        self.source.is_some() || self.endpoint_counted().is_some()
    }

    /// Whether the database has anything to do for it.
    fn needs_database(&self) -> bool {
        self.source.is_some()
            || match &self.endpoint {
                Err(_) => false,
                Ok(stage) => {
                    stage.counted.is_some() || matches!(stage.outcome, Ok(Work::Store { .. }))
                }
            }
    }
}

struct Job {
    request: IntakeRequest,
    reply: oneshot::Sender<Result<Accepted, ApiError>>,
}

/// The queue requests put their work on; writers are started by `Services`.
pub struct Committer {
    sender: mpsc::Sender<Job>,
    receiver: Mutex<Option<mpsc::Receiver<Job>>>,
    over_limit: Arc<OverLimit>,
}

impl Default for Committer {
    fn default() -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        Committer {
            sender,
            receiver: Mutex::new(Some(receiver)),
            over_limit: Arc::default(),
        }
    }
}

impl Committer {
    /// Counts and stores what `request` needs, with others that arrive meanwhile, and
    /// answers once that is committed.
    pub async fn submit(&self, request: IntakeRequest) -> Result<Accepted, ApiError> {
        if !request.needs_database() {
            return settle_without_database(request);
        }
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Job { request, reply })
            .await
            .map_err(|_| closing())?;
        answer.await.map_err(|_| closing())?
    }

    /// The writer tasks, which run until `drained` (the HTTP server has answered its last
    /// request) and then finish what is queued. Only the first call gets them.
    /// `handoff`: this process's worker, when it runs one (claiming at intake).
    pub fn writers(
        &self,
        db: Db,
        clock: Arc<dyn Clock>,
        drained: CancellationToken,
        handoff: Option<Handoff>,
    ) -> Vec<impl std::future::Future<Output = ()> + Send + 'static> {
        let receiver = self
            .receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(receiver) = receiver else {
            return Vec::new();
        };
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        let in_flight = Arc::new(InFlight::default());
        (0..WRITERS)
            .map(|_| {
                write_batches(
                    db.clone(),
                    receiver.clone(),
                    in_flight.clone(),
                    self.over_limit.clone(),
                    clock.clone(),
                    drained.clone(),
                    handoff.clone(),
                )
            })
            .collect()
    }
}

/// The answer of an request that counts nothing and stores nothing.
fn settle_without_database(request: IntakeRequest) -> Result<Accepted, ApiError> {
    match request.endpoint?.outcome? {
        Work::Answer(accepted) => Ok(accepted),
        Work::Store { .. } => Err(ApiError::Internal(
            "a submission to store skipped the database".into(),
        )),
    }
}

fn closing() -> ApiError {
    ApiError::Internal("intake is shutting down".into())
}

/// The longest a writer holds a batch open for more requests, and only while another
/// writer's batch is being written: the new batch would wait for that one's commit anyway
/// (the counter rows both hold, the lock PostgreSQL takes for a notifying commit, the WAL
/// flush), so what arrives meanwhile rides along instead of waiting for the next batch.
/// With no other batch in flight (an idle or lightly loaded server) nothing waits.
const GATHER_WINDOW: Duration = Duration::from_micros(500);

/// The batch size past which a writer gathers no more: by then the statement's fixed cost
/// is shared well enough, and under heavy load (batches of 40 from the queue alone) a
/// wait would only lengthen the tail (docs/BENCHMARKS.md). Also the bound on the moving
/// mean of the queue's batches ([`InFlight::note_queued`]) under which a writer gathers at
/// all.
const GATHER_UP_TO: usize = 16;

/// The weight of the newest batch in the moving mean of the queue's batches: 1/8, so the
/// mean follows a change of load within a few dozen batches (milliseconds under load) and
/// one short batch moves it by an eighth of the difference.
const QUEUED_MEAN_WEIGHT: usize = 8;

/// Fixed-point scale of that moving mean (in sixteenths of a request).
const QUEUED_MEAN_SCALE: usize = 16;

/// The batches being written, so that a writer can tell whether another one is in flight
/// and hear when one ends, and how large the queue's batches have been of late.
#[derive(Default)]
struct InFlight {
    batches: AtomicUsize,
    ended: Notify,
    /// The moving mean of the batches' sizes as the queue gave them (before any gather),
    /// in sixteenths of a request. Only the writer holding the queue reads and updates it.
    queued_mean: AtomicUsize,
}

impl InFlight {
    /// Notes the size of a batch as the queue gave it and answers whether the load is
    /// light enough to gather: the moving mean of those sizes under [`GATHER_UP_TO`].
    /// Under heavy load the queue alone gives batches of 30 to 40, and a moment's short
    /// batch between two large ones would otherwise wait behind a long statement; the
    /// mean keeps such a dip from gathering.
    fn note_queued(&self, size: usize) -> bool {
        let mean = self.queued_mean.load(Ordering::Relaxed);
        let mean =
            (mean * (QUEUED_MEAN_WEIGHT - 1) + size * QUEUED_MEAN_SCALE) / QUEUED_MEAN_WEIGHT;
        self.queued_mean.store(mean, Ordering::Relaxed);
        mean < GATHER_UP_TO * QUEUED_MEAN_SCALE
    }
}
async fn write_batches(
    db: Db,
    receiver: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    in_flight: Arc<InFlight>,
    over_limit: Arc<OverLimit>,
    clock: Arc<dyn Clock>,
    drained: CancellationToken,
    handoff: Option<Handoff>,
) {
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let first = tokio::select! {
                job = receiver.recv() => job,
                // Nothing more will be queued; take what is left, then stop.
                _ = drained.cancelled() => receiver.try_recv().ok(),
            };
            let Some(first) = first else { return };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match receiver.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            // Registered before the check, so that a batch ending in between is heard.
            let ended = in_flight.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let light_load = in_flight.note_queued(batch.len());
            if light_load
                && batch.len() < GATHER_UP_TO
                && in_flight.batches.load(Ordering::Acquire) > 0
            {
                let deadline = tokio::time::Instant::now() + GATHER_WINDOW;
                while batch.len() < GATHER_UP_TO {
                    tokio::select! {
                        job = receiver.recv() => match job {
                            Some(job) => batch.push(job),
                            None => break,
                        },
                        () = ended.as_mut() => break,
                        () = tokio::time::sleep_until(deadline) => break,
                    }
                }
            }
            (batch, InFlightBatch::start(&in_flight))
        };
        let (batch, _in_flight) = batch;
        meters::intake_batch(batch.len());
        let span = batch_span(&batch);
        // The time new deliveries are due by, when a test pins the clock.
        write_batch(&db, batch, clock.pinned(), handoff.as_ref(), &over_limit)
            .instrument(span)
            .await;
    }
}

/// The span of one batch's statement (telemetry/traces.rs): a trace of its own, since it
/// serves several submissions, linked to each submission's span it writes.
fn batch_span(batch: &[Job]) -> tracing::Span {
    let span =
        tracing::info_span!(target: traces::TARGET, "outbox batch", submissions = batch.len());
    if traces::on() {
        let trace_parents = batch
            .iter()
            .filter_map(|job| job.request.submission())
            .filter_map(|submission| submission.trace_parent.as_deref());
        for trace_parent in trace_parents {
            traces::link(&span, trace_parent);
        }
    }
    span
}

/// One batch in [`InFlight`] until dropped (written, or its task cancelled).
struct InFlightBatch<'a>(&'a InFlight);

impl<'a> InFlightBatch<'a> {
    fn start(in_flight: &'a InFlight) -> Self {
        in_flight.batches.fetch_add(1, Ordering::AcqRel);
        InFlightBatch(in_flight)
    }
}

impl Drop for InFlightBatch<'_> {
    fn drop(&mut self) {
        self.0.batches.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_waiters();
    }
}

async fn write_batch(
    db: &Db,
    batch: Vec<Job>,
    pinned: Option<DateTime<Utc>>,
    handoff: Option<&Handoff>,
    over_limit: &OverLimit,
) {
    let (mut requests, replies): (Vec<IntakeRequest>, Vec<_>) = batch
        .into_iter()
        .map(|job| (job.request, job.reply))
        .unzip();
    // When this process's worker may take claims from intake, each submission's first
    // delivery (the one it may claim, should its endpoint have a destination) gets its
    // token now, so that claims whose answer is lost can be given back. (Without a token a
    // delivery is never claimed at intake.)
    let mut possible_claims: Vec<(DeliveryId, ClaimToken)> = Vec::new();
    if handoff.is_some_and(Handoff::may_claim) {
        for submission in requests
            .iter_mut()
            .filter_map(IntakeRequest::submission_mut)
        {
            let token = ClaimToken::generate();
            possible_claims.push((submission.delivery_id.clone(), token.clone()));
            submission.claim_token = Some(token);
        }
    }
    // `Some` when claims may have committed unknown to us, with how long a statement still
    // running may take to end (see `give_back_lost`).
    let (answers, lost_claims) = match db
        .run(async |conn| Ok(count_and_store(conn, requests, pinned, handoff, over_limit).await))
        .await
    {
        Ok(Stored {
            answers,
            claimed,
            mut reservation,
            claims_unknown,
        }) => {
            hand_over(db, &mut reservation, claimed).await;
            // Inside the call there is no deadline: a lost answer there is a broken
            // connection, whose statement ended with it.
            (answers, claims_unknown.then_some(None))
        }
        Err(error) => {
            let deadline = match error {
                DbError::Deadline(deadline) => Some(deadline),
                _ => None,
            };
            let unknown = error.outcome_unknown().then_some(deadline);
            (fail_all(replies.len(), error), unknown)
        }
    };
    if let Some(deadline) = lost_claims.filter(|_| !possible_claims.is_empty()) {
        give_back_lost(db.clone(), possible_claims, deadline);
    }
    for (reply, answer) in replies.into_iter().zip(answers) {
        // A client that went away is no reason to stop.
        let _ = reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A light load gathers from the first batch on; under a heavy one a moment's short
    /// batch does not, and once the load has been light for a few dozen batches it
    /// gathers again.
    #[test]
    fn only_a_queue_short_of_late_gathers() {
        let in_flight = InFlight::default();
        assert!(in_flight.note_queued(3));
        for _ in 0..40 {
            in_flight.note_queued(37);
        }
        assert!(!in_flight.note_queued(2));
        assert!(!in_flight.note_queued(2));
        let mut batches_until_light = 0;
        while !in_flight.note_queued(8) {
            batches_until_light += 1;
            assert!(
                batches_until_light < 40,
                "the mean never came back under the bound"
            );
        }
        assert!(batches_until_light > 2);
        assert!(in_flight.note_queued(8));
        // Either side of the bound, the mean settles on the right side.
        for _ in 0..200 {
            in_flight.note_queued(17);
        }
        assert!(!in_flight.note_queued(17));
        for _ in 0..200 {
            in_flight.note_queued(15);
        }
        assert!(in_flight.note_queued(15));
    }
}
