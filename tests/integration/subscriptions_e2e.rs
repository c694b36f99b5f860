//! Subscriptions end to end with a third-party client: the npm `graphql-ws` client, run by
//! node, against an in-process server and across three `serve` processes.

use std::sync::Arc;

use hymical_forms::testing::clock::ManualClock;
use serde_json::{json, Value};

use support::harness::{graphql_data, wait_for_status, ServeProcess, TestApp};
use support::receiver::Receiver;
use support::ws_client::{event_id, expected as t, transition, NodeSubscriber};

const EVENTS: &str = "subscription($after: ID, $endpoint: ID) {
  deliveryStateChanged(afterEventId: $after, endpointId: $endpoint) {
    id kind state previousState attempts cycleAttempts outcome delivery { id }
  }
}";

async fn events(subscriber: &mut NodeSubscriber, count: usize) -> Vec<Value> {
    let mut events = Vec::new();
    while events.len() < count {
        events.push(subscriber.next_event().await);
    }
    let ids: Vec<i64> = events.iter().map(event_id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    events
}

#[tokio::test(flavor = "multi_thread")]
async fn the_graphql_ws_client_sees_deliveries_succeed_fail_and_replay() {
    let receiver = Receiver::start().await;
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let app = TestApp::start_with(
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "2"),
        ],
        clock.clone(),
    )
    .await;
    let (_, key) = app.create_key("dashboard").await;
    app.webhook_endpoint("contact", &receiver.url("/status/200"))
        .await;
    app.webhook_endpoint("flaky", &receiver.url("/failing"))
        .await;
    let mut subscriber = NodeSubscriber::start(
        &format!("ws://{}/graphql/ws", app.addr),
        &key,
        EVENTS,
        json!({ "after": app.db.newest_event_id().await.to_string() }),
    )
    .await;
    let worker = app.worker(None);

    // A form posted over HTTP, delivered.
    app.submit("contact", "email=a%40example.com").await;
    worker.run_once().await.unwrap();
    let delivered = events(&mut subscriber, 3).await;
    assert_eq!(
        delivered.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "null", "CREATED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("DELIVERED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    assert_eq!(delivered[2]["outcome"], "SUCCEEDED");
    let id = delivered[0]["delivery"]["id"].clone();
    assert!(delivered.iter().all(|e| e["delivery"]["id"] == id));

    // A receiver that fails until the delivery is FAILED (two attempts allowed).
    app.submit("flaky", "a=1").await;
    worker.run_once().await.unwrap();
    clock.advance(chrono::Duration::seconds(60));
    worker.run_once().await.unwrap();
    let failed = events(&mut subscriber, 5).await;
    assert_eq!(
        failed.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "null", "CREATED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("PENDING", "PROCESSING", "ATTEMPT_RECORDED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("FAILED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    let delivery_id = failed[0]["delivery"]["id"].as_str().unwrap().to_string();

    // Replayed through GraphQL: the new cycle's events.
    receiver
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let replay = app
        .gql(
            &key,
            "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state } } }",
            json!({ "id": delivery_id }),
        )
        .await;
    assert!(replay["errors"].is_null(), "{replay}");
    worker.run_once().await.unwrap();
    let cycle = events(&mut subscriber, 3).await;
    assert_eq!(
        cycle.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "FAILED", "REPLAYED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("DELIVERED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    assert_eq!(
        (
            cycle[0]["attempts"].clone(),
            cycle[0]["cycleAttempts"].clone()
        ),
        (json!(2), json!(0))
    );
    assert_eq!(
        (
            cycle[2]["attempts"].clone(),
            cycle[2]["cycleAttempts"].clone()
        ),
        (json!(3), json!(1))
    );
    assert!(cycle.iter().all(|e| e["delivery"]["id"] == delivery_id));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_api_and_two_worker_processes_share_a_full_cycle_with_replay() {
    let receiver = Receiver::start().await;
    let app = TestApp::start().await;
    let (_, key) = app.create_key("dashboard").await;
    app.webhook_endpoint("contact", &receiver.url("/status/200"))
        .await;
    // A final 4xx that is not 410 (a 410 would pause the endpoint and hold the replay).
    app.webhook_endpoint("missing", &receiver.url("/status/404"))
        .await;
    let after = app.db.newest_event_id().await;
    let private = ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true");
    let no_limits = ("FORMS_RATE_LIMIT_ENABLED", "false");
    // Two API-only processes: A serves the subscriber, C takes forms and the replay. Two
    // worker-only processes, B and D, deliver (whichever claims first).
    let a = ServeProcess::start(&app.db, &[("FORMS_WORKER_ENABLED", "false"), no_limits]);
    let b = ServeProcess::start(&app.db, &[("FORMS_API_ENABLED", "false"), private]);
    let c = ServeProcess::start(&app.db, &[("FORMS_WORKER_ENABLED", "false"), no_limits]);
    let d = ServeProcess::start(&app.db, &[("FORMS_API_ENABLED", "false"), private]);
    wait_for_status(&a.url("/ready"), 200).await;
    wait_for_status(&c.url("/ready"), 200).await;
    let mut subscriber = NodeSubscriber::start(
        &format!("ws://127.0.0.1:{}/graphql/ws", a.port),
        &key,
        EVENTS,
        json!({ "after": after.to_string() }),
    )
    .await;
    let http = reqwest::Client::new();
    let post = |endpoint: &str| {
        http.post(c.url(&format!("/f/{endpoint}")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("a=1")
            .send()
    };
    assert_eq!(post("contact").await.unwrap().status(), 202);
    let delivered = events(&mut subscriber, 3).await;
    assert_eq!(
        delivered.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "null", "CREATED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("DELIVERED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    assert_eq!(post("missing").await.unwrap().status(), 202);
    let failed = events(&mut subscriber, 3).await;
    assert_eq!(
        failed.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "null", "CREATED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("FAILED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    graphql_data(
        &http,
        &c.url("/graphql"),
        &key,
        "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state } } }",
        json!({ "id": failed[0]["delivery"]["id"] }),
    )
    .await;
    let again = events(&mut subscriber, 3).await;
    assert_eq!(
        again.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "FAILED", "REPLAYED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("FAILED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    // Every request went out once: each delivery was claimed by one of the two workers.
    assert_eq!(receiver.received().len(), 3);
    for process in [a, b, c, d] {
        let (status, log) = process.stop();
        assert!(status.success(), "{log}");
    }
}
