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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use super::rate_limit::{retry_after_seconds, window, Limit};
use super::{replay, Accepted};
use crate::clock::Clock;
use crate::db::models::ClaimedDelivery;
use crate::db::rate_limits::{BatchCounters, CountedRequest, Counter, Counts};
use crate::db::submissions::{IntakeClaim, NewSubmission, Written};
use crate::db::{self, Db, DbError};
use crate::delivery::handoff::{self, Handoff, Reservation};
use crate::error::ApiError;
use crate::model::ids::{ClaimToken, DeliveryId, SubmissionId};
use crate::model::rate_limit::RateLimitScope;
use crate::telemetry::meters::{self, IntakeStatement};

/// The most submissions one batch writes. Past this a batch's statement grows for little
/// gain (the flush is shared already), and its answers wait longer.
pub const MAX_BATCH: usize = 64;

/// How many batches may be committing at once, each on its own pooled connection.
pub const WRITERS: usize = 2;

/// Requests waiting for a writer at most; more wait to be queued (backpressure).
const QUEUE: usize = 4096;

/// The scope of [`Attempt::source`]'s limit, and of [`EndpointStage::counted`]'s.
const SOURCE: RateLimitScope = RateLimitScope::Ip;
const ENDPOINT: RateLimitScope = RateLimitScope::Endpoint;

/// A request counted against one rate limit (its scope is where it sits in [`Attempt`]).
pub struct Counted {
    pub subject: String,
    pub limit: Limit,
    pub now: DateTime<Utc>,
}

impl Counted {
    fn counter(&self) -> Counter<'_> {
        Counter {
            subject: &self.subject,
            window_start: window(self.now, self.limit.window_seconds).0,
        }
    }

    /// The refusal when the count including this request is over the limit.
    fn judge(&self, scope: RateLimitScope, count: i64) -> Result<(), ApiError> {
        if count <= i64::from(self.limit.requests) {
            return Ok(());
        }
        let (_, end) = window(self.now, self.limit.window_seconds);
        Err(ApiError::RateLimitExceeded {
            scope,
            limit: self.limit.requests,
            window_seconds: self.limit.window_seconds,
            retry_after_seconds: retry_after_seconds(self.now, end),
        })
    }
}

/// What a request turned into after the checks that need no database, in the order the
/// checks run (docs/intake.md): the per-source limit, then the endpoint (id and lookup),
/// then the per-endpoint limit, then everything else.
pub struct Attempt {
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
        submission: NewSubmission,
        field_count: usize,
    },
    /// Answer without storing (a tripped honeypot).
    Answer(Accepted),
}

impl Attempt {
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
    attempt: Attempt,
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
    /// Counts and stores what `attempt` needs, with others that arrive meanwhile, and
    /// answers once that is committed.
    pub async fn submit(&self, attempt: Attempt) -> Result<Accepted, ApiError> {
        if !attempt.needs_database() {
            return settle_without_database(attempt);
        }
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Job { attempt, reply })
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

/// The answer of an attempt that counts nothing and stores nothing.
fn settle_without_database(attempt: Attempt) -> Result<Accepted, ApiError> {
    match attempt.endpoint?.outcome? {
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
        // The time new deliveries are due by, when a test pins the clock.
        write_batch(&db, batch, clock.pinned(), handoff.as_ref(), &over_limit).await;
    }
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
    let (mut attempts, replies): (Vec<Attempt>, Vec<_>) = batch
        .into_iter()
        .map(|job| (job.attempt, job.reply))
        .unzip();
    // When this process's worker may take claims from intake, each delivery it may claim
    // gets its token now, so that claims whose answer is lost can be given back. (Without
    // a token a delivery is never claimed at intake.)
    let mut possible_claims: Vec<(DeliveryId, ClaimToken)> = Vec::new();
    if handoff.is_some_and(Handoff::may_claim) {
        for submission in attempts.iter_mut().filter_map(Attempt::submission_mut) {
            if submission.expects_delivery {
                let token = ClaimToken::generate();
                possible_claims.push((submission.delivery_id.clone(), token.clone()));
                submission.claim_token = Some(token);
            }
        }
    }
    // `Some` when claims may have committed unknown to us, with how long a statement still
    // running may take to end (see `give_back_lost`).
    let (answers, lost_claims) = match db
        .run(async |conn| Ok(count_and_store(conn, attempts, pinned, handoff, over_limit).await))
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

/// The batch may have committed claims whose answer was lost: they go back to the queue
/// now rather than when their leases run out, and once more after `deadline`, by when a
/// statement still running when its call gave up has surely ended. Where nothing was
/// claimed, or nothing committed, no row matches.
fn give_back_lost(db: Db, claims: Vec<(DeliveryId, ClaimToken)>, deadline: Option<Duration>) {
    tokio::spawn(async move {
        let pairs = || claims.iter().map(|(id, token)| (id, token));
        handoff::hand_back(&db, pairs()).await;
        if let Some(deadline) = deadline {
            tokio::time::sleep(deadline).await;
            handoff::hand_back(&db, pairs()).await;
        }
    });
}

/// Passes the deliveries the batch claimed to this process's worker, after the commit;
/// those the worker can no longer take (it stopped meanwhile) go back to the queue.
async fn hand_over(db: &Db, reservation: &mut Reservation, claimed: Vec<ClaimedDelivery>) {
    if claimed.is_empty() {
        return;
    }
    meters::deliveries_claimed("intake", claimed.len());
    let returned: Vec<ClaimedDelivery> = claimed
        .into_iter()
        .filter_map(|delivery| reservation.start(delivery))
        .collect();
    handoff::hand_back(db, returned.iter().map(ClaimedDelivery::claim)).await;
}

/// What [`count_and_store`] did with a batch.
struct Stored {
    /// Each attempt's answer, in the batch's order.
    answers: Vec<Result<Accepted, ApiError>>,
    /// The deliveries it claimed for this process's worker, and the slots taken for them.
    claimed: Vec<ClaimedDelivery>,
    reservation: Reservation,
    /// The outbox statement's answer was lost while it could claim: it may have
    /// committed claims that nobody knows of (see [`give_back_lost`]).
    claims_unknown: bool,
}

/// Counts and stores the batch; answers each attempt, with the deliveries it claimed and
/// the slots they were claimed for.
///
/// With rate limiting on, a batch that stores anything is first written as if every
/// request in it were within its limits, by an outbox statement that also counts them all
/// as its last step and fails as a whole should a counter end over its limit: one round
/// trip and one transaction, with the counter rows locked only for the statement's end and
/// its commit ([`store_counted`]). Should that statement refuse, or should a counter of
/// the batch be over its limit already ([`OverLimit`]), the batch is counted on its own,
/// each request in the order of the checks, and what the limits let through is written
/// then.
async fn count_and_store(
    conn: &mut diesel_async::AsyncPgConnection,
    attempts: Vec<Attempt>,
    pinned: Option<DateTime<Utc>>,
    handoff: Option<&Handoff>,
    over_limit: &OverLimit,
) -> Stored {
    let attempts = match store_counted(conn, attempts, pinned, handoff, over_limit).await {
        Ok(stored) => return stored,
        Err(attempts) => attempts,
    };
    // 2. and 5.: the per-source limit, then the per-endpoint one for those within it.
    let counts = match count(conn, &attempts).await {
        Ok(counts) => counts,
        Err(error) => {
            return Stored {
                answers: fail_all(attempts.len(), error),
                claimed: Vec::new(),
                reservation: Reservation::none(),
                claims_unknown: false,
            };
        }
    };
    over_limit.note(&attempts, &counts);
    let mut answers: Vec<Option<Result<Accepted, ApiError>>> = Vec::with_capacity(attempts.len());
    let mut stores: Vec<(NewSubmission, usize)> = Vec::new();
    let mut stored_at: Vec<usize> = Vec::new();
    for (index, (attempt, counts)) in attempts.into_iter().zip(counts).enumerate() {
        match judge(attempt, counts) {
            Ok(Work::Store {
                submission,
                field_count,
            }) => {
                stores.push((submission, field_count));
                stored_at.push(index);
                answers.push(None);
            }
            Ok(Work::Answer(accepted)) => answers.push(Some(Ok(accepted))),
            Err(error) => answers.push(Some(Err(error))),
        }
    }
    let reservation = reserve(handoff, stores.iter().map(|(submission, _)| submission));
    let (stored, claimed, claims_unknown) = store(conn, stores, pinned, reservation.claim()).await;
    for (index, answer) in stored_at.into_iter().zip(stored) {
        answers[index] = Some(answer);
    }
    let answers = answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| Err(ApiError::Internal("an intake answer was lost".into())))
        })
        .collect();
    Stored {
        answers,
        claimed,
        reservation,
        claims_unknown,
    }
}

/// The batch written and counted by one statement, when rate limiting is on, something is
/// to be stored, and no counter of the batch is known to be over its limit; otherwise, or
/// when the statement refuses (a counter over its limit, any other refusal), nothing was
/// written and the attempts come back to be counted on their own first.
async fn store_counted(
    conn: &mut diesel_async::AsyncPgConnection,
    attempts: Vec<Attempt>,
    pinned: Option<DateTime<Utc>>,
    handoff: Option<&Handoff>,
    over_limit: &OverLimit,
) -> Result<Stored, Vec<Attempt>> {
    if !attempts.iter().any(Attempt::counts)
        || !attempts
            .iter()
            .any(|attempt| attempt.submission().is_some())
        || over_limit.holds_any(&attempts)
    {
        return Err(attempts);
    }
    let limiters = (SOURCE.as_str(), ENDPOINT.as_str());
    let counters = BatchCounters::every_request(attempts.iter().map(Attempt::counters), limiters);
    let submissions: Vec<&NewSubmission> =
        attempts.iter().filter_map(Attempt::submission).collect();
    let reservation = reserve(handoff, submissions.iter().copied());
    let batch = meters::intake_statement(
        IntakeStatement::Outbox,
        db::submissions::insert_batch(conn, &submissions, pinned, reservation.claim(), &counters),
    )
    .await;
    let rows = match batch {
        Ok(rows) => rows,
        Err(error) if error.outcome_unknown() => {
            // It may have committed, counters and all: counting it again would count twice.
            let claims_unknown = reservation.claim().limit > 0;
            return Ok(Stored {
                answers: fail_all(attempts.len(), error),
                claimed: Vec::new(),
                reservation,
                claims_unknown,
            });
        }
        Err(error) => {
            // Counted on its own and written again next; should that fail too, it is
            // logged there.
            if !error.exceeds_rate_limit() {
                tracing::debug!(error = %error.summary(), size = submissions.len(), "a counted batch of submissions failed; counting it on its own");
            }
            return Err(attempts);
        }
    };
    let (queued, claimed) = written_rows(rows);
    let mut answers = Vec::with_capacity(attempts.len());
    for attempt in attempts {
        answers.push(match attempt.endpoint.and_then(|stage| stage.outcome) {
            Ok(Work::Store {
                submission,
                field_count,
            }) => {
                let written = queued.get(&submission.id).copied();
                answer_stored(conn, submission, field_count, Ok(written)).await
            }
            Ok(Work::Answer(accepted)) => Ok(accepted),
            Err(error) => Err(error),
        });
    }
    Ok(Stored {
        answers,
        claimed,
        reservation,
        claims_unknown: false,
    })
}

/// The worker's free slots, taken just before the statement that may claim for them (at
/// most one per delivery with a token); those not used go back (with a wake-up) once it
/// has answered.
fn reserve<'a>(
    handoff: Option<&Handoff>,
    submissions: impl Iterator<Item = &'a NewSubmission>,
) -> Reservation {
    match handoff {
        Some(handoff) => {
            let claimable = submissions
                .filter(|submission| submission.claim_token.is_some())
                .count();
            handoff.reserve(claimable)
        }
        None => Reservation::none(),
    }
}

/// The outbox statement's rows: per submission written, whether a delivery was queued
/// with it; and the deliveries it claimed.
fn written_rows(rows: Vec<Written>) -> (HashMap<SubmissionId, bool>, Vec<ClaimedDelivery>) {
    let mut queued = HashMap::with_capacity(rows.len());
    let mut claimed = Vec::new();
    for row in rows {
        queued.insert(row.id, row.delivery_queued);
        claimed.extend(row.claimed);
    }
    (queued, claimed)
}

/// The same failure as every one of `n` answers.
fn fail_all(n: usize, error: DbError) -> Vec<Result<Accepted, ApiError>> {
    let error = Arc::new(error);
    (0..n).map(|_| Err(ApiError::from(error.clone()))).collect()
}

/// Counts the batch's attempts against their limits in one statement; one `Counts` per
/// attempt (nothing counted, and no statement, when rate limiting is off).
async fn count(
    conn: &mut diesel_async::AsyncPgConnection,
    attempts: &[Attempt],
) -> Result<Vec<Counts>, DbError> {
    if !attempts.iter().any(Attempt::counts) {
        let nothing = Counts {
            source: None,
            endpoint: None,
        };
        return Ok(vec![nothing; attempts.len()]);
    }
    let requests: Vec<CountedRequest<'_>> = attempts
        .iter()
        .map(|attempt| CountedRequest {
            source: attempt
                .source
                .as_ref()
                .map(|counted| (counted.counter(), counted.limit.requests)),
            endpoint: attempt.endpoint_counted().map(Counted::counter),
        })
        .collect();
    let limiters = (SOURCE.as_str(), ENDPOINT.as_str());
    meters::intake_statement(
        IntakeStatement::Count,
        db::rate_limits::count_attempts(conn, &requests, limiters),
    )
    .await
}

/// An attempt's answer from its counts, in the order of the checks: the per-source
/// limit, the endpoint (steps 3–4), the per-endpoint limit, then the rest.
fn judge(attempt: Attempt, counts: Counts) -> Result<Work, ApiError> {
    if let Some(counted) = &attempt.source {
        let count = counts.source.ok_or_else(|| missing_count("per-source"))?;
        counted.judge(SOURCE, count)?;
    }
    let stage = attempt.endpoint?;
    if let Some(counted) = &stage.counted {
        let count = counts
            .endpoint
            .ok_or_else(|| missing_count("per-endpoint"))?;
        counted.judge(ENDPOINT, count)?;
    }
    stage.outcome
}

/// A counter the statement should have answered and did not: a broken statement.
fn missing_count(scope: &str) -> ApiError {
    ApiError::Internal(format!("a request's {scope} count is missing"))
}

/// Writes the batch's submissions in one statement, or one by one when that statement
/// fails for a reason other than the database's reach; then answers each: accepted, or,
/// when its idempotency key was taken meanwhile, as a replay of the submission that holds
/// it (or 409).
/// Also answers the deliveries it wrote claimed (`claim`).
async fn store(
    conn: &mut diesel_async::AsyncPgConnection,
    stores: Vec<(NewSubmission, usize)>,
    pinned: Option<DateTime<Utc>>,
    claim: IntakeClaim,
) -> (Vec<Result<Accepted, ApiError>>, Vec<ClaimedDelivery>, bool) {
    if stores.is_empty() {
        return (Vec::new(), Vec::new(), false);
    }
    let claiming = claim.limit > 0;
    let mut claimed = Vec::new();
    let submissions: Vec<&NewSubmission> =
        stores.iter().map(|(submission, _)| submission).collect();
    // Per submission: written (and with a delivery or not), not written, or failed.
    let mut written: Vec<Result<Option<bool>, ApiError>> = Vec::with_capacity(submissions.len());
    let batch = meters::intake_statement(
        IntakeStatement::Outbox,
        db::submissions::insert_batch(conn, &submissions, pinned, claim, &BatchCounters::default()),
    )
    .await;
    // A batch whose answer was lost may have committed: its claims are unknown, and
    // writing its submissions again would not help.
    let lost = batch.as_ref().is_err_and(DbError::outcome_unknown);
    let claims_unknown = claiming && lost;
    match batch {
        Ok(rows) => {
            let queued;
            (queued, claimed) = written_rows(rows);
            written.extend(submissions.iter().map(|s| Ok(queued.get(&s.id).copied())));
        }
        Err(error @ DbError::Query(_)) if submissions.len() > 1 && !lost => {
            tracing::warn!(error = %error.summary(), size = submissions.len(), "a batch of submissions failed; writing them one by one");
            for submission in &submissions {
                // One by one, none claimed: this is the rare path, the queue serves them.
                let one = db::submissions::insert_batch(
                    conn,
                    &[submission],
                    pinned,
                    IntakeClaim::NONE,
                    &BatchCounters::default(),
                )
                .await;
                written.push(match one {
                    Ok(rows) => Ok(rows.first().map(|row| row.delivery_queued)),
                    // Its endpoint was erased after this request found it (in a cache).
                    Err(error) if error.violates_foreign_key("submissions_endpoint_id_fkey") => {
                        Err(ApiError::EndpointNotFound {
                            endpoint_id: submission.endpoint_id.to_string(),
                        })
                    }
                    Err(error) => Err(ApiError::from(error)),
                });
            }
        }
        Err(error) => {
            let gone = error.violates_foreign_key("submissions_endpoint_id_fkey");
            let error = Arc::new(error);
            written.extend(submissions.iter().map(|submission| {
                Err(if gone {
                    // A batch of one whose endpoint was erased after it was found.
                    ApiError::EndpointNotFound {
                        endpoint_id: submission.endpoint_id.to_string(),
                    }
                } else {
                    ApiError::from(error.clone())
                })
            }));
        }
    }
    let mut answers = Vec::with_capacity(stores.len());
    for ((submission, field_count), written) in stores.into_iter().zip(written) {
        answers.push(answer_stored(conn, submission, field_count, written).await);
    }
    (answers, claimed, claims_unknown)
}

/// A stored submission's answer from what its statement did with it: written (with a
/// delivery or not), not written because a concurrent first request with the same
/// idempotency key won (answered as its replay), or failed.
async fn answer_stored(
    conn: &mut diesel_async::AsyncPgConnection,
    submission: NewSubmission,
    field_count: usize,
    written: Result<Option<bool>, ApiError>,
) -> Result<Accepted, ApiError> {
    match written? {
        Some(delivery_queued) => Ok(Accepted {
            submission_id: submission.id,
            endpoint_id: submission.endpoint_id,
            received_at: submission.received_at,
            field_count,
            idempotent_replay: false,
            delivery_queued,
        }),
        None => match &submission.idempotency {
            Some((key, fingerprint)) => {
                match db::submissions::find_by_idempotency_key(conn, &submission.endpoint_id, key)
                    .await
                {
                    Ok(Some(existing)) => {
                        replay(existing, &submission.endpoint_id, key, fingerprint)
                    }
                    Ok(None) => Err(ApiError::Internal(
                        "an idempotency key's submission vanished".into(),
                    )),
                    Err(error) => Err(ApiError::from(error)),
                }
            }
            None => Err(ApiError::Internal(
                "a submission without an idempotency key conflicted".into(),
            )),
        },
    }
}

/// Rate-limit counters this process found over their limit, by scope and window start,
/// with the window's end. A batch counted on one of them is counted on its own before it
/// is written: written and counted by one statement it would only roll back. A counter
/// never goes down within its window, so what is here stays true until the window ends;
/// what is not here is simply tried.
#[derive(Default)]
struct OverLimit(Mutex<HashMap<(RateLimitScope, DateTime<Utc>), OverInWindow>>);

struct OverInWindow {
    ends: DateTime<Utc>,
    subjects: HashSet<String>,
}

/// At most this many counters are remembered (past it, the windows that ended are
/// dropped, and when none has, a new one is not remembered: its batches are tried).
const OVER_LIMIT_REMEMBERED: usize = 10_000;

impl OverLimit {
    fn known(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(RateLimitScope, DateTime<Utc>), OverInWindow>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a counter of any of `attempts` is known to be over its limit.
    fn holds_any(&self, attempts: &[Attempt]) -> bool {
        let known = self.known();
        if known.is_empty() {
            return false;
        }
        attempts.iter().any(|attempt| {
            [SOURCE, ENDPOINT]
                .into_iter()
                .zip(attempt.counters())
                .any(|(scope, counter)| {
                    counter.is_some_and(|(counter, _)| {
                        known
                            .get(&(scope, counter.window_start))
                            .is_some_and(|window| window.subjects.contains(counter.subject))
                    })
                })
        })
    }

    /// Remembers the counters that `counts` found over their limits.
    fn note(&self, attempts: &[Attempt], counts: &[Counts]) {
        let mut over = Vec::new();
        for (attempt, counts) in attempts.iter().zip(counts) {
            for (scope, counted, count) in [
                (SOURCE, attempt.source.as_ref(), counts.source),
                (ENDPOINT, attempt.endpoint_counted(), counts.endpoint),
            ] {
                if let (Some(counted), Some(count)) = (counted, count) {
                    if counted.judge(scope, count).is_err() {
                        over.push((scope, counted));
                    }
                }
            }
        }
        if over.is_empty() {
            return;
        }
        let mut known = self.known();
        for (scope, counted) in over {
            let (start, ends) = window(counted.now, counted.limit.window_seconds);
            let remembered = |known: &HashMap<_, OverInWindow>| -> usize {
                known.values().map(|window| window.subjects.len()).sum()
            };
            if remembered(&known) >= OVER_LIMIT_REMEMBERED {
                known.retain(|_, window| window.ends > counted.now);
                if remembered(&known) >= OVER_LIMIT_REMEMBERED {
                    return;
                }
            }
            known
                .entry((scope, start))
                .or_insert_with(|| OverInWindow {
                    ends,
                    subjects: HashSet::new(),
                })
                .subjects
                .insert(counted.subject.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn from_source(subject: &str, now: DateTime<Utc>) -> Attempt {
        Attempt {
            source: Some(Counted {
                subject: subject.into(),
                limit: Limit {
                    requests: 3,
                    window_seconds: 60,
                },
                now,
            }),
            endpoint: Err(ApiError::EndpointNotFound {
                endpoint_id: "gone".into(),
            }),
        }
    }

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

    /// A counter found over its limit is remembered for its own window and subject only,
    /// and only when it is over.
    #[test]
    fn over_limit_remembers_a_counter_over_its_limit_until_its_window_ends() {
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 30).unwrap();
        let next_window = now + chrono::Duration::seconds(60);
        let over_limit = OverLimit::default();
        let attempts = [from_source("a", now), from_source("b", now)];
        let within = |source| Counts {
            source: Some(source),
            endpoint: None,
        };
        over_limit.note(&attempts, &[within(3), within(3)]);
        assert!(!over_limit.holds_any(&attempts));

        over_limit.note(&attempts, &[within(4), within(1)]);
        assert!(over_limit.holds_any(&[from_source("a", now)]));
        assert!(over_limit.holds_any(&[from_source("b", now), from_source("a", now)]));
        assert!(!over_limit.holds_any(&[from_source("b", now)]));
        assert!(!over_limit.holds_any(&[from_source("a", next_window)]));
    }

    /// Past its bound it forgets the windows that ended, and remembers nothing new while
    /// none has.
    #[test]
    fn over_limit_stays_within_its_bound() {
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 30).unwrap();
        let over_limit = OverLimit::default();
        let over = Counts {
            source: Some(4),
            endpoint: None,
        };
        let subjects: Vec<String> = (0..OVER_LIMIT_REMEMBERED + 1)
            .map(|n| format!("s{n}"))
            .collect();
        for subject in &subjects {
            over_limit.note(&[from_source(subject, now)], &[over]);
        }
        assert!(over_limit.holds_any(&[from_source("s0", now)]));
        assert!(!over_limit.holds_any(&[from_source(&subjects[OVER_LIMIT_REMEMBERED], now)]));
        // A minute on, the full window has ended: it is dropped for the new one.
        let later = now + chrono::Duration::seconds(60);
        over_limit.note(&[from_source("late", later)], &[over]);
        assert!(over_limit.holds_any(&[from_source("late", later)]));
        assert!(!over_limit.holds_any(&[from_source("s0", now)]));
    }
}
