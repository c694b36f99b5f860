//! Batched recording: attempts whose requests finish close together are recorded by one
//! statement (db/sql/record_attempts.sql), each under its own claim-token fence.
//!
//! A worker's request tasks hand their results here; two writer tasks take whatever has
//! queued the moment they are free (no timer: a lone result is recorded at once), at most
//! [`MAX_BATCH`] and at most one attempt per delivery per batch (a second one for the same
//! delivery, a late worker's say, waits for the next batch, so the attempt numbers come
//! from the row as the first left it). If a batch's statement fails for a reason other than
//! the database's reach, its attempts are recorded again one by one, so one bad row cannot
//! fail the others. The writers end when the worker that owns this recorder is gone.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::db::queue::{self, AttemptRecord, OwnerTransition, Recorded};
use crate::db::{Db, DbError};
use crate::model::ids::{AttemptId, ClaimToken, DeliveryId};
use crate::model::state::AttemptOutcome;

/// The most attempts one statement records.
pub const MAX_BATCH: usize = 32;
const WRITERS: usize = 2;

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
    pub transition: OwnerTransition,
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
        }
    }
}

type Answer = Result<Recorded, Arc<DbError>>;

struct Job {
    attempt: Attempt,
    reply: oneshot::Sender<Answer>,
}

pub struct Recorder {
    sender: mpsc::Sender<Job>,
}

impl Recorder {
    /// Starts the writers (on the current runtime).
    pub fn start(db: Db, clock: Arc<dyn Clock>) -> Recorder {
        let (sender, receiver) = mpsc::channel(1024);
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        for _ in 0..WRITERS {
            tokio::spawn(write_batches(db.clone(), clock.clone(), receiver.clone()));
        }
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
    receiver: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
) {
    // Attempts for a delivery already in the batch, kept for this writer's next one.
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
        {
            let mut receiver = receiver.lock().await;
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
        }
        write_batch(&db, clock.pinned(), batch).await;
    }
}

async fn write_batch(db: &Db, now: Option<DateTime<Utc>>, batch: Vec<Job>) {
    let (attempts, replies): (Vec<Attempt>, Vec<_>) = batch
        .into_iter()
        .map(|job| (job.attempt, job.reply))
        .unzip();
    let rows: Vec<(AttemptRecord<'_>, OwnerTransition)> = attempts
        .iter()
        .map(|a| (a.record(), a.transition))
        .collect();
    let answers: Vec<Answer> = match db
        .run(async |conn| Ok(queue::record_attempts(conn, &rows, now).await))
        .await
    {
        Ok(Ok(recorded)) => recorded.into_iter().map(found).collect(),
        Ok(Err(DbError::Query(error))) if rows.len() > 1 => {
            tracing::warn!(error = %error, size = rows.len(), "a batch of attempts failed; recording them one by one");
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
    for (reply, answer) in replies.into_iter().zip(answers) {
        let _ = reply.send(answer);
    }
}

/// A missing row: the delivery is gone (it cannot be: deliveries are never deleted while
/// claimed), reported as the single statement reported it.
fn found(recorded: Option<Recorded>) -> Answer {
    recorded.ok_or_else(|| Arc::new(DbError::Query(diesel::result::Error::NotFound)))
}
