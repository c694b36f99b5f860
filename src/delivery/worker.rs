//! The in-process delivery worker pool.
//!
//! One loop per process claims due deliveries (never more than it has free request slots
//! for), starts one task per claim, and sleeps until a wake-up notification, a freed slot,
//! the next due time, the fallback poll, or shutdown. Each task hands its delivery to the
//! sender of its destination's kind (senders.rs) and records the result under the
//! claim-token fence as soon as the request ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::handoff::{self, ClaimActivity, Handoff, Started};
use super::outcome::{self, AttemptResult, NextStep};
use super::recorder::{self, HandOnSettings, Recorder};
use super::senders::{Senders, Submission};
use crate::clock::Clock;
use crate::config::WorkerConfig;
use crate::db::destinations::FailureThresholds;
use crate::db::models::ClaimedDelivery;
use crate::db::queue::{self, ClaimRequest, OwnerTransition, Recorded};
use crate::db::{Db, DbError};
use crate::model::ids::AttemptId;
use crate::model::receiver::RetryPolicy;
use crate::model::state::{DeliveryState, DestinationKind};
use crate::telemetry::{meters, traces};

pub struct Worker {
    db: Db,
    config: WorkerConfig,
    /// The server's retry schedule, for destinations without their own.
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
    /// A sender per destination kind.
    senders: Senders,
    /// Signalled when a delivery may have become due (a notification, a reconnection).
    wake: Arc<Notify>,
    /// One permit per request in flight (`FORMS_WORKER_CONCURRENCY`).
    slots: Arc<Semaphore>,
    /// Records the requests' results, several to a statement.
    recorder: Recorder,
    /// Whether the last claim found less than it asked for: nothing else was due, so
    /// intake may claim new deliveries for this worker (`handoff.rs`).
    caught_up: Arc<AtomicBool>,
    /// Its claims, for intake to tell whether one overlapped a batch of its own.
    claims: Arc<ClaimActivity>,
    /// Describes and links a submission's files in its webhooks and emails.
    files: Arc<crate::files::Files>,
}

impl Worker {
    /// A worker with the process's pool, clock and files, and the worker's and webhooks'
    /// settings of `config`.
    pub fn new(
        db: Db,
        clock: Arc<dyn Clock>,
        files: Arc<crate::files::Files>,
        config: &crate::config::Config,
        senders: Senders,
        wake: Arc<Notify>,
    ) -> Arc<Worker> {
        let (config, webhook) = (config.worker.clone(), config.webhook.clone());
        let slots = Arc::new(Semaphore::new(config.concurrency));
        let recorder = Recorder::start(
            db.clone(),
            clock.clone(),
            FailureThresholds {
                pause: webhook.pause_after_failed_deliveries,
                warn: webhook.warn_after_failed_deliveries,
            },
            HandOnSettings {
                lease: config.lease,
                destination_concurrency: config.destination_concurrency,
            },
        );
        Arc::new(Worker {
            recorder,
            db,
            config,
            retry: webhook.retry_policy(),
            clock,
            senders,
            wake,
            slots,
            caught_up: Arc::new(AtomicBool::new(false)),
            claims: Arc::default(),
            files,
        })
    }

    /// Intake's side of claiming at intake for this worker, and the deliveries it will
    /// pass on, for [`Worker::run`].
    /// `wake_mark`: the payload of the wake-ups intake sends for other processes' workers
    /// only, which this worker's listener ignores.
    pub fn handoff(
        &self,
        stopping: CancellationToken,
        wake_mark: Arc<str>,
    ) -> (Handoff, UnboundedReceiver<Started>) {
        Handoff::new(
            self.slots.clone(),
            self.wake.clone(),
            self.caught_up.clone(),
            self.claims.clone(),
            &self.config,
            stopping,
            wake_mark,
        )
    }

    /// Claims as many due deliveries as there are free slots (at most a batch) and starts
    /// a task for each. Returns how many were claimed and how many were asked for.
    async fn claim_and_start(
        self: &Arc<Self>,
        tasks: &mut JoinSet<usize>,
        stopping: &CancellationToken,
    ) -> Result<(usize, usize), DbError> {
        // The slots are taken first, so that intake cannot take them meanwhile.
        let mut permits = handoff::take_slots(&self.slots, self.config.batch_size as usize);
        if permits.is_empty() {
            // Busy: whether anything else is due is not known.
            self.caught_up.store(false, Ordering::Release);
            return Ok((0, 0));
        }
        let wanted = permits.len();
        let request = ClaimRequest {
            now: self.clock.pinned(),
            lease: self.config.lease,
            limit: wanted as u32,
            destination_concurrency: self.config.destination_concurrency,
        };
        let running = self.claims.begin();
        let claimed = self
            .db
            .run(async |conn| queue::claim(conn, request).await)
            .await;
        drop(running);
        // A failed claim says nothing about the queue.
        self.caught_up.store(
            claimed.as_ref().is_ok_and(|claimed| claimed.len() < wanted),
            Ordering::Release,
        );
        let claimed = claimed?;
        let count = claimed.len();
        if count > 0 {
            tracing::debug!(count, "claimed deliveries");
            meters::deliveries_claimed("worker", count);
        }
        for delivery in claimed {
            let Some(permit) = permits.pop() else {
                // The claim returns at most `wanted`; never more than the slots taken.
                handoff::hand_back(&self.db, [delivery.claim()]).await;
                continue;
            };
            self.start(tasks, delivery, permit, stopping);
        }
        Ok((count, wanted))
    }

    /// Starts the task that sends `delivery` in its slot.
    fn start(
        self: &Arc<Self>,
        tasks: &mut JoinSet<usize>,
        delivery: ClaimedDelivery,
        permit: OwnedSemaphorePermit,
        stopping: &CancellationToken,
    ) {
        let worker = self.clone();
        let stopping = stopping.clone();
        tasks.spawn(async move {
            let in_flight = meters::in_flight();
            let taken = worker.process(delivery, &stopping).await;
            drop(in_flight);
            drop(permit);
            taken
        });
    }

    /// Test seam: claims one batch and processes it to the end, deliveries handed on to
    /// its slots included. Returns how many deliveries it took (claimed or handed on).
    #[cfg(any(test, feature = "testing"))]
    pub async fn run_once(self: &Arc<Self>) -> Result<usize, DbError> {
        let never = CancellationToken::new();
        let mut tasks = JoinSet::new();
        self.claim_and_start(&mut tasks, &never).await?;
        let mut taken = 0;
        while let Some(task) = tasks.join_next().await {
            match task {
                Ok(n) => taken += n,
                Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                Err(_) => {}
            }
        }
        Ok(taken)
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, lets requests in flight
    /// finish (they are bounded by the client's timeouts), records them and returns.
    /// `handed`: deliveries this process's intake claimed for it (`handoff.rs`).
    pub async fn run(
        self: Arc<Self>,
        shutdown: CancellationToken,
        mut handed: Option<UnboundedReceiver<Started>>,
    ) {
        tracing::info!(
            concurrency = self.config.concurrency,
            batch_size = self.config.batch_size,
            "delivery worker started"
        );
        let mut tasks = JoinSet::new();
        let poll = self.config.poll_interval;
        'claiming: loop {
            if shutdown.is_cancelled() {
                break;
            }
            let wait = match self.claim_and_start(&mut tasks, &shutdown).await {
                // A full batch: more may be due right now.
                Ok((claimed, wanted)) if claimed > 0 && claimed == wanted => continue,
                Ok(_) => self.until_next_due(poll).await,
                Err(error) => {
                    tracing::warn!(error = %error.summary(), "claiming failed; retrying after the poll interval");
                    poll
                }
            };
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = self.wake.notified() => continue 'claiming,
                    _ = &mut sleep => continue 'claiming,
                    Some(_) = tasks.join_next(), if !tasks.is_empty() => continue 'claiming,
                    _ = shutdown.cancelled() => break 'claiming,
                    // Claimed already: started without a claim of this loop's own.
                    Some((delivery, permit)) = next_handed(&mut handed) => {
                        self.start(&mut tasks, delivery, permit, &shutdown);
                    }
                }
            }
        }
        // Intake may have claimed a few more meanwhile: they have not started, so they go
        // back to the queue (the tasks hand back what was started but not sent yet).
        if let Some(mut handed) = handed {
            handed.close();
            let mut unstarted = Vec::new();
            while let Some((delivery, _permit)) = handed.recv().await {
                unstarted.push(delivery);
            }
            handoff::hand_back(&self.db, unstarted.iter().map(ClaimedDelivery::claim)).await;
        }
        let in_flight = tasks.len();
        if in_flight > 0 {
            tracing::info!(in_flight, "worker stopping: waiting for requests in flight");
        }
        while tasks.join_next().await.is_some() {}
        tracing::info!("delivery worker stopped");
    }

    /// How long to sleep: until the next future due time or lease expiry (by the
    /// database's clock), at most `poll`. What is due already but was not claimed (another
    /// worker holds it, its endpoint has no room or is paused) waits for a wake-up, a
    /// freed slot or the poll.
    async fn until_next_due(&self, poll: Duration) -> Duration {
        let now = self.clock.pinned();
        let next = self
            .db
            .run(async |conn| queue::next_due_in(conn, now).await)
            .await;
        match next {
            Ok(Some(wait)) if !wait.is_zero() => wait.min(poll),
            _ => poll,
        }
    }

    /// Sends `delivery` and records the result; then, while its slot is handed on, each
    /// next delivery of the same destination claimed with the recording (recorder.rs).
    /// Returns how many deliveries the slot took.
    async fn process(&self, delivery: ClaimedDelivery, stopping: &CancellationToken) -> usize {
        let mut taken = 0;
        let mut next = Some(delivery);
        while let Some(delivery) = next.take() {
            taken += 1;
            next = self.process_one(delivery, stopping).await;
        }
        taken
    }

    /// Sends one delivery and records the result; answers the delivery claimed into its
    /// slot, if it was handed on.
    async fn process_one(
        &self,
        delivery: ClaimedDelivery,
        stopping: &CancellationToken,
    ) -> Option<ClaimedDelivery> {
        if stopping.is_cancelled() {
            handoff::hand_back(&self.db, [delivery.claim()]).await;
            return None;
        }
        let (Some(submission_id), Some(received_at), Some(fields)) = (
            &delivery.submission_id,
            delivery.received_at,
            &delivery.fields,
        ) else {
            self.fail_erased(&delivery).await;
            return None;
        };
        let attempted_at = self.clock.now();
        // The files' descriptions and links, for a webhook or an email; should they not be
        // readable, the delivery goes back to the queue rather than out without them.
        let files = match delivery.kind {
            _ if !delivery.has_files => Vec::new(),
            DestinationKind::Autoresponder => Vec::new(),
            DestinationKind::Webhook | DestinationKind::Email => {
                match self.files.metadata(submission_id, received_at).await {
                    Ok(files) => files,
                    Err(error) => {
                        tracing::warn!(delivery_id = %delivery.id, error = %error.summary(), "cannot read the submission's files; the delivery goes back to the queue");
                        handoff::hand_back(&self.db, [delivery.claim()]).await;
                        return None;
                    }
                }
            }
        };
        let submission = Submission {
            id: submission_id,
            received_at,
            fields,
            files: &files,
        };
        // The attempt's span (telemetry/traces.rs) continues its submission's trace; its
        // context goes to a webhook's receiver as `traceparent`.
        let span = tracing::info_span!(
            target: traces::TARGET,
            "attempt",
            delivery_id = delivery.id.as_str(),
            submission_id = submission_id.as_str(),
            endpoint_id = delivery.endpoint_id.as_str(),
            destination_id = delivery.destination_id.as_str(),
            destination_kind = delivery.kind.as_str(),
            attempt = tracing::field::Empty,
            outcome = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
        );
        traces::continue_trace(&span, delivery.trace_parent.as_deref());
        let trace_parent = traces::traceparent(&span);
        let started = Instant::now();
        let result = self
            .senders
            .send(
                &delivery,
                &submission,
                attempted_at,
                trace_parent.as_deref(),
            )
            .instrument(span.clone())
            .await;
        span.record("outcome", result.outcome.as_str());
        span.record("http.response.status_code", result.response_status);
        self.record(
            &delivery,
            &result,
            attempted_at,
            started.elapsed(),
            stopping,
        )
        .instrument(span)
        .await
    }

    /// Records the attempt, retrying briefly if the database is unavailable: the request
    /// went out, so it belongs in the history. If it still cannot be recorded, the lease
    /// expires and the delivery is sent again (at least once, never lost). Answers the
    /// destination's next delivery when the slot was handed on to it: only while this
    /// worker has other free slots (no destination waits for this one) and is not
    /// stopping.
    async fn record(
        &self,
        delivery: &ClaimedDelivery,
        result: &AttemptResult,
        attempted_at: chrono::DateTime<chrono::Utc>,
        elapsed: Duration,
        stopping: &CancellationToken,
    ) -> Option<ClaimedDelivery> {
        // The owner's transition, decided from the cycle count it claimed with.
        let cycle_attempts = delivery.cycle_attempts.max(0) as u32 + 1;
        let policy = delivery.receiver.retry_policy.unwrap_or(self.retry);
        let transition = match outcome::next_step(result, cycle_attempts, &policy) {
            NextStep::Delivered => OwnerTransition::Delivered,
            NextStep::Failed => OwnerTransition::Failed,
            NextStep::RetryAfter(wait) => OwnerTransition::Retry { after: wait },
        };
        let record = recorder::Attempt {
            attempt_id: AttemptId::generate(),
            delivery_id: delivery.id.clone(),
            claim_token: delivery.claim_token.clone(),
            destination_url: delivery.destination_url.clone(),
            attempted_at,
            duration_ms: elapsed.as_millis().min(i32::MAX as u128) as i32,
            outcome: result.outcome,
            response_status: result.response_status.map(i32::from),
            error: result.error.clone(),
            reply: result.reply.clone(),
            transition,
            destination_id: delivery.destination_id.clone(),
            destination_kind: delivery.kind,
            destination_had_failures: delivery.destination_failed_deliveries > 0,
            hand_on: !stopping.is_cancelled() && self.slots.available_permits() > 0,
        };
        let mut delay = Duration::from_millis(100);
        for attempt in 1..=5 {
            let outcome = self.recorder.record(record.clone()).await;
            match outcome {
                Ok(recorder::Written {
                    recorded:
                        Recorded::Owner {
                            attempt_number,
                            state,
                        },
                    next,
                }) => {
                    // The attempt's number is the record's: this runs in the attempt's
                    // span (process_one), which has a field for it.
                    tracing::Span::current().record("attempt", attempt_number);
                    meters::delivery_attempt(delivery.kind, result.outcome, elapsed, Some(state));
                    // One line per attempt, with its ids; a delivery that ends failed is
                    // a warning (tracing's level is fixed per call site, hence two).
                    macro_rules! attempt_line {
                        ($level:ident, $message:literal) => {
                            tracing::$level!(
                                delivery_id = %delivery.id,
                                submission_id = delivery.submission_id.as_ref().map(tracing::field::display),
                                attempt = attempt_number,
                                outcome = result.outcome.as_str(),
                                status = result.response_status,
                                state = %state,
                                $message
                            )
                        };
                    }
                    if state == DeliveryState::Failed {
                        attempt_line!(warn, "delivery failed: no attempts left in this cycle");
                    } else {
                        attempt_line!(info, "delivery attempt");
                    }
                    if state == DeliveryState::Pending {
                        // A retry is due later; make sure the loop looks again then.
                        self.wake.notify_one();
                    }
                    return next;
                }
                Ok(recorder::Written {
                    recorded:
                        Recorded::Late {
                            attempt_number,
                            state,
                        },
                    next,
                }) => {
                    meters::delivery_attempt(delivery.kind, result.outcome, elapsed, None);
                    meters::late_attempt();
                    tracing::warn!(
                        delivery_id = %delivery.id,
                        attempt = attempt_number,
                        outcome = result.outcome.as_str(),
                        status = result.response_status,
                        state = %state,
                        "late delivery attempt: the claim had been superseded"
                    );
                    return next;
                }
                Err(error) if matches!(*error, DbError::Query(diesel::result::Error::NotFound)) => {
                    // Nothing to record it on, and nothing will send it again.
                    tracing::warn!(delivery_id = %delivery.id, "delivery attempt not recorded: the delivery was erased with its endpoint meanwhile");
                    return None;
                }
                Err(error) => {
                    tracing::warn!(delivery_id = %delivery.id, try_number = attempt, error = %error.summary(), "could not record a delivery attempt");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        tracing::error!(delivery_id = %delivery.id, "gave up recording a delivery attempt; the lease will expire and it will be sent again");
        None
    }

    async fn fail_erased(&self, delivery: &ClaimedDelivery) {
        let now = self.clock.pinned();
        let result = self
            .db
            .run(async |conn| {
                queue::fail_without_attempt(conn, &delivery.id, &delivery.claim_token, now).await
            })
            .await;
        match result {
            Ok(true) => {
                meters::delivery_failed_without_attempt(delivery.kind);
                tracing::warn!(delivery_id = %delivery.id, "delivery failed without an attempt: its submission was erased")
            }
            // The claim had been superseded: whoever holds it now decides.
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(delivery_id = %delivery.id, error = %error.summary(), "could not fail an erased delivery")
            }
        }
    }
}

/// The next delivery intake handed over, or never when this worker has no intake.
async fn next_handed(handed: &mut Option<UnboundedReceiver<Started>>) -> Option<Started> {
    match handed {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}
