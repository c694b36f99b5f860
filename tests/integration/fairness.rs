//! One bad receiver never holds up the others: a per-endpoint cap on requests in flight,
//! exact across claimers, claims that take turns across endpoints, and slots handed on
//! to a busy destination's next delivery within its cap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use hymical_forms::testing::db::queue::{self as deliveries, ClaimRequest};

use support::harness::TestApp;
use support::receiver::Receiver;

const LEASE: Duration = Duration::from_secs(60);

fn claim_request(limit: u32, cap: u32) -> ClaimRequest {
    ClaimRequest {
        now: None,
        lease: LEASE,
        limit,
        destination_concurrency: cap,
    }
}

/// Deliveries of `endpoint` in progress (an endpoint id of the test's own, plain letters).
async fn count_for(app: &TestApp, endpoint: &str) -> usize {
    app.db
        .count(&format!(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'processing' AND endpoint_id = '{endpoint}'"
        ))
        .await as usize
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_receiver_does_not_hold_up_other_endpoints() {
    // 300 deliveries queued for a receiver that accepts and never answers (read timeout
    // 3 s), 32 workers; a healthy endpoint's deliveries posted a second later must arrive
    // without waiting for the dead one's backlog (which takes 300 / 16 × 3 s ≈ 1 minute to
    // drain at 16 in flight).
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1"),
            ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "3"),
            ("FORMS_WORKER_LEASE_SECONDS", "10"),
            ("FORMS_WORKER_CONCURRENCY", "32"),
            ("FORMS_WORKER_POLL_SECONDS", "0.2"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    app.webhook_endpoint("dead", &receiver.url("/hang")).await;
    app.webhook_endpoint("healthy", &receiver.url("/ok")).await;
    for n in 0..300 {
        app.submit("dead", &format!("n={n}")).await;
    }
    let queued: Vec<_> = app.db.deliveries().await;
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(app.worker(None).run(stop.clone(), None));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let posted = Instant::now();
    for n in 0..10 {
        app.submit("healthy", &format!("n={n}")).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let arrived = loop {
        let healthy = receiver
            .received()
            .into_iter()
            .filter(|r| r.path == "/ok")
            .count();
        if healthy == 10 {
            break posted.elapsed();
        }
        assert!(Instant::now() < deadline, "{healthy} of 10 arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        arrived < Duration::from_secs(3),
        "the healthy endpoint waited {arrived:?} behind the dead one"
    );
    // The dead endpoint never had more than its cap in flight, and the deliveries it
    // could not start kept their schedule: no attempt spent, due time unchanged.
    assert!(count_for(&app, "dead").await <= 16);
    let now = app.db.deliveries().await;
    for before in queued.iter() {
        let after = now.iter().find(|d| d.id == before.id).unwrap();
        if after.state == "pending" && after.attempts == 0 {
            assert_eq!(after.next_attempt_at, before.next_attempt_at);
            assert_eq!(after.cycle_attempts, 0);
        }
    }
    stop.cancel();
    receiver.stop_hanging();
    worker.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_endpoint_cap_is_exact_across_claimers() {
    let app = TestApp::start_without_rate_limit().await;
    app.webhook_endpoint("busy", "https://receiver.example/h")
        .await;
    app.webhook_endpoint("quiet", "https://receiver.example/h")
        .await;
    for n in 0..10 {
        app.submit("busy", &format!("n={n}")).await;
    }
    app.submit("quiet", "n=0").await;
    let mut a = app.db.connect_as_service().await;
    let mut b = app.db.connect_as_service().await;
    // A claims inside an open transaction: it holds the endpoints it took from.
    diesel::sql_query("BEGIN").execute(&mut a).await.unwrap();
    let by_a = deliveries::claim(&mut a, claim_request(10, 3))
        .await
        .unwrap();
    // Turns across endpoints: both endpoints' oldest, then busy's next two (cap 3).
    assert_eq!(by_a.len(), 4);
    assert_eq!(by_a.iter().filter(|c| c.endpoint_id == "busy").count(), 3);
    // While A is open, B cannot take from what A holds.
    let by_b = deliveries::claim(&mut b, claim_request(10, 3))
        .await
        .unwrap();
    assert!(by_b.is_empty(), "{by_b:?}");
    diesel::sql_query("COMMIT").execute(&mut a).await.unwrap();
    // A committed 3 in flight for busy: its cap is reached, whoever claims.
    let by_b = deliveries::claim(&mut b, claim_request(10, 3))
        .await
        .unwrap();
    assert!(by_b.is_empty(), "{by_b:?}");
    // One ends: exactly one more may start.
    assert_eq!(
        deliveries::hand_back(&mut a, &[(&by_a[0].id, &by_a[0].claim_token)])
            .await
            .unwrap(),
        1
    );
    let returned_to = by_a[0].endpoint_id.clone();
    let by_b = deliveries::claim(&mut b, claim_request(10, 3))
        .await
        .unwrap();
    assert_eq!(by_b.len(), 1);
    assert_eq!(by_b[0].endpoint_id, returned_to);
    assert_eq!(count_for(&app, "busy").await, 3);

    // Many claimers at once, released together: the cap still holds.
    let mut claimers = Vec::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(6));
    for _ in 0..6 {
        let mut conn = app.db.connect_as_service().await;
        let barrier = barrier.clone();
        claimers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut claimed = 0;
            for _ in 0..5 {
                claimed += deliveries::claim(&mut conn, claim_request(10, 5))
                    .await
                    .unwrap()
                    .len();
            }
            claimed
        }));
    }
    let mut claimed = 0;
    for claimer in claimers {
        claimed += claimer.await.unwrap();
    }
    assert_eq!(claimed, 2, "busy had 3 of 5 in flight: two more, no more");
    assert_eq!(count_for(&app, "busy").await, 5);
}

/// Deliveries claimed in the transaction that recorded another delivery's attempt: slots
/// handed on (their `claimed` event shares the recording's transaction id).
async fn handed_on(app: &TestApp) -> i64 {
    app.db
        .count(
            "SELECT count(*) AS n FROM delivery_events c WHERE c.kind = 'claimed' AND EXISTS (
             SELECT 1 FROM delivery_events r
             WHERE r.kind = 'attempt_recorded' AND r.xmin = c.xmin)",
        )
        .await
}

/// Queues `deliveries` to one destination whose receiver takes 20 ms an answer, runs a
/// worker with `slots` request slots and a cap of `cap` per destination until every
/// delivery is recorded delivered, and answers the receiver as it was then.
async fn drain_one_busy_destination(
    slots: &str,
    cap: &str,
    deliveries: usize,
) -> (TestApp, Receiver) {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_WORKER_CONCURRENCY", slots),
            ("FORMS_WORKER_ENDPOINT_CONCURRENCY", cap),
            ("FORMS_WORKER_POLL_SECONDS", "0.2"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    app.webhook_endpoint("busy", &receiver.url("/slow/20"))
        .await;
    for n in 0..deliveries {
        app.submit("busy", &format!("n={n}")).await;
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(app.worker(None).run(stop.clone(), None));
    receiver.wait_for(deliveries).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while app
        .db
        .count("SELECT count(*) AS n FROM webhook_deliveries WHERE state <> 'delivered'")
        .await
        > 0
    {
        assert!(Instant::now() < deadline, "not every delivery was recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    worker.await.unwrap();
    (app, receiver)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_destination_hands_its_slots_on_within_its_cap() {
    let (app, receiver) = drain_one_busy_destination("8", "3", 40).await;
    // Each delivery went out once, never more than the cap at a time, and the cap was
    // used: the slots were handed on, not left idle between one request and the next.
    assert_eq!(receiver.received().len(), 40);
    assert_eq!(receiver.most_slow_at_once(), 3);
    assert_eq!(
        app.db
            .count(
                "SELECT count(*) AS n FROM delivery_attempts WHERE attempt_number = 1 AND NOT late"
            )
            .await,
        40
    );
    // Most deliveries after the first three were claimed by the recording of the one
    // before them: the claim loop claimed only when a slot was not handed on.
    let handed = handed_on(&app).await;
    assert!(
        handed >= 20,
        "only {handed} of 40 claims were slots handed on"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_worker_hands_no_slot_on() {
    // Every slot of the worker busy with one destination: each freed slot goes back to
    // the claim loop, which shares slots among destinations by turn.
    let (app, receiver) = drain_one_busy_destination("2", "2", 12).await;
    assert_eq!(receiver.received().len(), 12);
    assert_eq!(receiver.most_slow_at_once(), 2);
    assert_eq!(handed_on(&app).await, 0);
}
