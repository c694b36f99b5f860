//! Storing a batch: the outbox statement with its counting, the batch counted on its own
//! when a counter would pass its limit, each submission alone when the batch fails, and
//! the deliveries claimed at intake handed over to this process's worker.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::limits::{count, judge};
use super::limits::{OverLimit, ENDPOINT, SOURCE};
use super::{IntakeRequest, Work};
use crate::db::models::ClaimedDelivery;
use crate::db::rate_limits::BatchCounters;
use crate::db::submissions::{IntakeClaim, NewSubmission, Written};
use crate::db::{self, Db, DbError};
use crate::delivery::handoff::{self, Handoff, Reservation};
use crate::error::ApiError;
use crate::intake::{replay, Accepted};
use crate::model::ids::{ClaimToken, DeliveryId, SubmissionId};
use crate::telemetry::meters::{self, IntakeStatement};

/// The batch may have committed claims whose answer was lost: they go back to the queue
/// now rather than when their leases run out, and once more after `deadline`, by when a
/// statement still running when its call gave up has surely ended. Where nothing was
/// claimed, or nothing committed, no row matches.
pub(super) fn give_back_lost(
    db: Db,
    claims: Vec<(DeliveryId, ClaimToken)>,
    deadline: Option<Duration>,
) {
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
pub(super) async fn hand_over(
    db: &Db,
    reservation: &mut Reservation,
    claimed: Vec<ClaimedDelivery>,
) {
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
pub(super) struct Stored {
    /// Each request's answer, in the batch's order.
    pub(super) answers: Vec<Result<Accepted, ApiError>>,
    /// The deliveries it claimed for this process's worker, and the slots taken for them.
    pub(super) claimed: Vec<ClaimedDelivery>,
    pub(super) reservation: Reservation,
    /// The outbox statement's answer was lost while it could claim: it may have
    /// committed claims that nobody knows of (see [`give_back_lost`]).
    pub(super) claims_unknown: bool,
}

/// Counts and stores the batch; answers each request, with the deliveries it claimed and
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
pub(super) async fn count_and_store(
    conn: &mut diesel_async::AsyncPgConnection,
    requests: Vec<IntakeRequest>,
    pinned: Option<DateTime<Utc>>,
    handoff: Option<&Handoff>,
    over_limit: &OverLimit,
) -> Stored {
    let requests = match store_counted(conn, requests, pinned, handoff, over_limit).await {
        Ok(stored) => return stored,
        Err(requests) => requests,
    };
    // 2. and 5.: the per-source limit, then the per-endpoint one for those within it.
    let counts = match count(conn, &requests).await {
        Ok(counts) => counts,
        Err(error) => {
            return Stored {
                answers: fail_all(requests.len(), error),
                claimed: Vec::new(),
                reservation: Reservation::none(),
                claims_unknown: false,
            };
        }
    };
    over_limit.note(&requests, &counts);
    let mut answers: Vec<Option<Result<Accepted, ApiError>>> = Vec::with_capacity(requests.len());
    let mut stores: Vec<(NewSubmission, usize)> = Vec::new();
    let mut stored_at: Vec<usize> = Vec::new();
    for (index, (request, counts)) in requests.into_iter().zip(counts).enumerate() {
        match judge(request, counts) {
            Ok(Work::Store {
                submission,
                field_count,
            }) => {
                stores.push((*submission, field_count));
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
/// written and the requests come back to be counted on their own first.
pub(super) async fn store_counted(
    conn: &mut diesel_async::AsyncPgConnection,
    requests: Vec<IntakeRequest>,
    pinned: Option<DateTime<Utc>>,
    handoff: Option<&Handoff>,
    over_limit: &OverLimit,
) -> Result<Stored, Vec<IntakeRequest>> {
    if !requests.iter().any(IntakeRequest::counts)
        || !requests
            .iter()
            .any(|request| request.submission().is_some())
        || over_limit.holds_any(&requests)
    {
        return Err(requests);
    }
    let limiters = (SOURCE.as_str(), ENDPOINT.as_str());
    let counters =
        BatchCounters::every_request(requests.iter().map(IntakeRequest::counters), limiters);
    let submissions: Vec<&NewSubmission> = requests
        .iter()
        .filter_map(IntakeRequest::submission)
        .collect();
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
                answers: fail_all(requests.len(), error),
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
            return Err(requests);
        }
    };
    let (queued, claimed) = written_rows(rows);
    let mut answers = Vec::with_capacity(requests.len());
    for request in requests {
        answers.push(match request.endpoint.and_then(|stage| stage.outcome) {
            Ok(Work::Store {
                submission,
                field_count,
            }) => {
                let written = queued.get(&submission.id).copied();
                answer_stored(conn, *submission, field_count, Ok(written)).await
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
pub(super) fn reserve<'a>(
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
pub(super) fn written_rows(
    rows: Vec<Written>,
) -> (HashMap<SubmissionId, bool>, Vec<ClaimedDelivery>) {
    let mut queued = HashMap::with_capacity(rows.len());
    let mut claimed = Vec::new();
    for row in rows {
        queued.insert(row.id, row.delivery_queued);
        claimed.extend(row.claimed);
    }
    (queued, claimed)
}

/// The same failure as every one of `n` answers.
pub(super) fn fail_all(n: usize, error: DbError) -> Vec<Result<Accepted, ApiError>> {
    let error = Arc::new(error);
    (0..n).map(|_| Err(ApiError::from(error.clone()))).collect()
}

/// Writes the batch's submissions in one statement, or one by one when that statement
/// fails for a reason other than the database's reach; then answers each: accepted, or,
/// when its idempotency key was taken meanwhile, as a replay of the submission that holds
/// it (or 409).
/// Also answers the deliveries it wrote claimed (`claim`).
pub(super) async fn store(
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
pub(super) async fn answer_stored(
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
