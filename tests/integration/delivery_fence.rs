//! The claim-token fence and claiming races, with independent connections (two
//! independent connections holding two different claims on one row).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use hymical_forms::testing::clock::ManualClock;
use hymical_forms::testing::db::models::ClaimedDelivery;
use hymical_forms::testing::db::queue::{
    self as deliveries, AttemptRecord, OwnerTransition, Recorded,
};
use hymical_forms::testing::model::ids::{AttemptId, ClaimToken, DeliveryId};
use hymical_forms::testing::model::state::{AttemptOutcome, DeliveryState};
use tokio::sync::Barrier;

use support::harness::TestApp;

const LEASE: Duration = Duration::from_secs(60);

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap()
}

/// An app with one endpoint and `count` queued deliveries (nothing is ever sent).
async fn queued(count: usize) -> (TestApp, Vec<String>) {
    let app = TestApp::start_with(
        &[("FORMS_RATE_LIMIT_ENABLED", "false")],
        Arc::new(ManualClock::new(start())),
    )
    .await;
    app.webhook_endpoint("contact", "https://receiver.example/hook")
        .await;
    for _ in 0..count {
        app.submit("contact", "a=1").await;
    }
    let ids = app.db.delivery_ids().await;
    (app, ids)
}

/// The one delivery claimed on `conn` at `now`, for `LEASE`.
async fn claim_one(conn: &mut AsyncPgConnection, now: DateTime<Utc>) -> ClaimedDelivery {
    let mut claimed = support::harness::claim_at(conn, now, LEASE, 1)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "nothing to claim");
    claimed.remove(0)
}

/// What two workers, each on a connection of its own, claim (at most `limit` each) at
/// `now`, set off at the same moment.
async fn two_racing_claims(app: &TestApp, now: DateTime<Utc>, limit: u32) -> Vec<ClaimedDelivery> {
    let barrier = Arc::new(Barrier::new(2));
    let mut racers = Vec::new();
    for _ in 0..2 {
        let mut racer = app.db.connect().await;
        let barrier = barrier.clone();
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            support::harness::claim_at(&mut racer, now, LEASE, limit)
                .await
                .unwrap()
        }));
    }
    let mut claimed = Vec::new();
    for racer in racers {
        claimed.extend(racer.await.unwrap());
    }
    claimed
}

/// One attempt's values, typed as a worker holds them.
struct Attempt {
    attempt_id: AttemptId,
    delivery_id: DeliveryId,
    claim_token: ClaimToken,
    outcome: AttemptOutcome,
    status: Option<i32>,
}

impl Attempt {
    fn record(&self) -> AttemptRecord<'_> {
        AttemptRecord {
            attempt_id: &self.attempt_id,
            delivery_id: &self.delivery_id,
            claim_token: &self.claim_token,
            destination_url: "https://receiver.example/hook",
            attempted_at: start(),
            duration_ms: 12,
            outcome: self.outcome,
            response_status: self.status,
            error: None,
            reply: None,
        }
    }
}

fn attempt(
    delivery_id: &str,
    token: &ClaimToken,
    attempt_id: &str,
    outcome: &str,
    status: Option<i32>,
) -> Attempt {
    Attempt {
        attempt_id: AttemptId::parse(attempt_id).unwrap(),
        delivery_id: DeliveryId::parse(delivery_id).unwrap(),
        claim_token: token.clone(),
        outcome: AttemptOutcome::parse(outcome).unwrap(),
        status,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_superseded_worker_cannot_touch_the_new_claim() {
    let (app, ids) = queued(1).await;
    let id = &ids[0];
    let mut worker_a = app.db.connect().await;
    let mut worker_b = app.db.connect().await;

    let claim_a = support::harness::claim_at(&mut worker_a, start(), LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claim_a.len(), 1);
    // A's lease runs out mid-request; B reclaims.
    let later = start() + chrono::Duration::seconds(61);
    assert!(support::harness::claim_at(
        &mut worker_b,
        start() + chrono::Duration::seconds(59),
        LEASE,
        10
    )
    .await
    .unwrap()
    .is_empty());
    let claim_b = support::harness::claim_at(&mut worker_b, later, LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claim_b.len(), 1);
    assert_ne!(claim_a[0].claim_token, claim_b[0].claim_token);
    assert_eq!(claim_b[0].cycle_attempts, 0, "a claim changes no counter");
    let before = app.db.delivery(id).await;
    assert_eq!(
        (before.attempts, before.cycle_attempts),
        (0, 0),
        "a claim changes no counter"
    );
    assert_eq!(
        before.claim_expires_at,
        Some(later + chrono::Duration::seconds(60))
    );

    // A finishes: success, then (say) a final 400, then a retryable 503. None may move
    // the delivery, whatever transition the superseded worker asks for.
    for (attempt_id, outcome, status, transition, now) in [
        (
            "att_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1",
            "succeeded",
            Some(200),
            OwnerTransition::Delivered,
            Some(later),
        ),
        (
            "att_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2",
            "http_error",
            Some(400),
            OwnerTransition::Failed,
            Some(later),
        ),
        (
            "att_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa3",
            "http_error",
            Some(503),
            OwnerTransition::Retry {
                after: Duration::ZERO,
            },
            Some(later),
        ),
    ] {
        let recorded = deliveries::record_attempt(
            &mut worker_a,
            &attempt(id, &claim_a[0].claim_token, attempt_id, outcome, status).record(),
            transition,
            now,
        )
        .await
        .unwrap();
        assert!(
            matches!(recorded, Recorded::Late { ref state, .. } if *state == DeliveryState::Processing),
            "{recorded:?}"
        );
    }
    let after = app.db.delivery(id).await;
    assert_eq!(
        after.state, "processing",
        "not delivered, failed or pending"
    );
    assert_eq!(
        after.claim_token, before.claim_token,
        "the new claim stands"
    );
    assert_eq!(
        after.claim_expires_at, before.claim_expires_at,
        "the lease is neither cleared nor shortened"
    );
    assert_eq!(
        after.cycle_attempts, 0,
        "the owner's allowance is not spent"
    );
    assert_eq!(
        after.next_attempt_at, before.next_attempt_at,
        "the due time does not move"
    );
    assert_eq!(after.attempts, 3, "the requests it really made are counted");
    assert!(after.completed_at.is_none());

    // The owner records a retryable failure: the next free number, and the transition.
    let retry_at = later + chrono::Duration::seconds(10);
    let recorded = deliveries::record_attempt(
        &mut worker_b,
        &attempt(
            id,
            &claim_b[0].claim_token,
            "att_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb1",
            "http_error",
            Some(503),
        )
        .record(),
        OwnerTransition::Retry {
            after: Duration::from_secs(10),
        },
        Some(later),
    )
    .await
    .unwrap();
    assert_eq!(
        recorded,
        Recorded::Owner {
            attempt_number: 4,
            state: DeliveryState::Pending
        }
    );
    let owned = app.db.delivery(id).await;
    assert_eq!(owned.progress(), ("pending", 4, 1));
    assert_eq!(owned.next_attempt_at, retry_at);
    assert!(owned.claim_token.is_none() && owned.claim_expires_at.is_none());
    let history = app.db.attempts(id).await;
    assert_eq!(
        history
            .iter()
            .map(|a| (a.attempt_number, a.late))
            .collect::<Vec<_>>(),
        [(1, true), (2, true), (3, true), (4, false)]
    );
}

/// Records a succeeded attempt (id ending in `attempt_suffix`) of delivery `id` under
/// `token` on `conn`, in a task of its own: it may queue on the row lock meanwhile.
fn record_success_in_a_task(
    mut conn: AsyncPgConnection,
    id: &str,
    token: ClaimToken,
    attempt_suffix: &str,
) -> tokio::task::JoinHandle<Recorded> {
    let attempt = attempt(
        id,
        &token,
        &format!("att_cccccccccccccccccccccccccccccc{attempt_suffix}"),
        "succeeded",
        Some(200),
    );
    tokio::spawn(async move {
        deliveries::record_attempt(
            &mut conn,
            &attempt.record(),
            OwnerTransition::Delivered,
            Some(start()),
        )
        .await
        .unwrap()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_worker_and_the_owner_recording_at_once_get_different_numbers() {
    let (app, ids) = queued(1).await;
    let id = ids[0].clone();
    let mut first = app.db.connect().await;
    let mut second = app.db.connect().await;
    let claim_a = claim_one(&mut first, start()).await;
    let claim_b = claim_one(&mut second, start() + chrono::Duration::seconds(61)).await;

    // Hold the row lock so that both recorders are queued on it at the same time.
    let mut blocker = app.db.connect().await;
    blocker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM webhook_deliveries WHERE id = '{id}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let late = record_success_in_a_task(first, &id, claim_a.claim_token, "01");
    let owner = record_success_in_a_task(second, &id, claim_b.claim_token, "02");
    // Both recorders wait on the row lock.
    app.db.until_waiting_for_locks(2).await;
    blocker.batch_execute("COMMIT").await.unwrap();
    let late = late.await.unwrap();
    let owner = owner.await.unwrap();
    let mut numbers = vec![
        match late {
            Recorded::Late { attempt_number, .. } => attempt_number,
            other => panic!("{other:?}"),
        },
        match owner {
            Recorded::Owner { attempt_number, .. } => attempt_number,
            other => panic!("{other:?}"),
        },
    ];
    numbers.sort();
    assert_eq!(numbers, [1, 2], "no number reused");
    let delivery = app.db.delivery(&id).await;
    assert_eq!(delivery.progress(), ("delivered", 2, 1));
    assert_eq!(app.db.attempts(&id).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_racing_for_one_due_row_claim_it_once() {
    let (app, ids) = queued(10).await;
    // Ten rounds, one row due per round.
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at + interval '1 day'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    for id in ids {
        diesel::sql_query(format!(
            "UPDATE webhook_deliveries SET next_attempt_at = '{}' WHERE id = '{id}'",
            start().to_rfc3339()
        ))
        .execute(&mut conn)
        .await
        .unwrap();
        let claimed = two_racing_claims(&app, start(), 5).await;
        assert_eq!(claimed.len(), 1, "exactly one racer holds the row");
        assert_eq!(claimed[0].id, id);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_locked_elsewhere_is_skipped_not_waited_on() {
    let (app, ids) = queued(1).await;
    let mut holder = app.db.connect().await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM webhook_deliveries WHERE id = '{}' FOR UPDATE",
            ids[0]
        ))
        .await
        .unwrap();
    let mut worker = app.db.connect().await;
    let claimed = tokio::time::timeout(
        Duration::from_secs(5),
        support::harness::claim_at(&mut worker, start(), LEASE, 10),
    )
    .await
    .expect("the claim does not wait for the lock")
    .unwrap();
    assert!(claimed.is_empty());
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        support::harness::claim_at(&mut worker, start(), LEASE, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_lease_is_reclaimed_by_exactly_one_of_two_racers() {
    let (app, ids) = queued(1).await;
    let mut first = app.db.connect().await;
    let original = claim_one(&mut first, start()).await;
    let after_lease = start() + chrono::Duration::seconds(60);
    let claimed = two_racing_claims(&app, after_lease, 1).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, ids[0]);
    assert_ne!(claimed[0].claim_token, original.claim_token);
    assert_eq!(
        app.db.delivery(&ids[0]).await.claim_expires_at,
        Some(after_lease + chrono::Duration::seconds(60))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hand_back_is_guarded_by_the_token() {
    let (app, ids) = queued(1).await;
    let mut conn = app.db.connect().await;
    let claim = claim_one(&mut conn, start()).await;
    let id = DeliveryId::parse(&ids[0]).unwrap();
    let stale = ClaimToken::parse("clm_00000000000000000000000000000000").unwrap();
    assert_eq!(
        deliveries::hand_back(&mut conn, &[(&id, &stale)])
            .await
            .unwrap(),
        0
    );
    assert_eq!(app.db.delivery(&ids[0]).await.state, "processing");
    assert_eq!(
        deliveries::hand_back(&mut conn, &[(&id, &claim.claim_token)])
            .await
            .unwrap(),
        1
    );
    let handed = app.db.delivery(&ids[0]).await;
    assert_eq!(handed.progress(), ("pending", 0, 0));
    assert!(handed.claim_token.is_none() && handed.claim_expires_at.is_none());
    assert!(handed.next_attempt_at <= start(), "still due");
    assert_eq!(
        support::harness::claim_at(&mut conn, start(), LEASE, 1)
            .await
            .unwrap()
            .len(),
        1
    );
}
