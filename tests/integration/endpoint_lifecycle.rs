//! Endpoints that pause instead of failing (a receiver gone, a run of failed deliveries,
//! an operator's hand), resume with their held deliveries' allowance intact, and deletion
//! with the operator's choice of keeping or erasing the history (docs/delivery.md).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hymical_forms::testing::clock::SystemClock;
use serde_json::{json, Value};

use support::harness::TestApp;
use support::receiver::Receiver;
use support::ws_client::WsClient;

const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
];

const ENDPOINT_STATE: &str =
    "query($id: ID!) { endpoint(id: $id) { deliveryState pauseReason pausedAt consecutiveFailedDeliveries deletedAt webhookUrl } }";

async fn endpoint_state(app: &TestApp, key: &str, id: &str) -> Value {
    let body = app.gql(key, ENDPOINT_STATE, json!({ "id": id })).await;
    assert!(body["errors"].is_null(), "{body}");
    body["data"]["endpoint"].clone()
}

/// Waits (at most 20 s) until the endpoint's `field` is `expected`: the worker keeps the
/// run of failures and pauses after it has answered the request task.
async fn until_endpoint(app: &TestApp, key: &str, id: &str, field: &str, expected: Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = endpoint_state(app, key, id).await;
        if state[field] == expected {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "{field} never became {expected}: {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// From the first endpoint event on (a fresh database has none before the test's), so a
/// change made before the server has started the subscription is still sent.
async fn subscribe_endpoint_events(app: &TestApp, key: &str, id: &str) -> WsClient {
    let mut client = WsClient::ready(&format!("ws://{}/graphql/ws", app.addr), key).await;
    client
        .send(json!({
            "type": "subscribe",
            "id": "endpoint",
            "payload": {
                "query": "subscription($id: ID) { endpointStateChanged(endpointId: $id, afterEventId: \"0\") { id endpointId kind reason occurredAt endpoint { deliveryState } } }",
                "variables": { "id": id },
            },
        }))
        .await;
    client
}

async fn next_endpoint_event(client: &mut WsClient) -> Value {
    let message = client.next_json().await;
    assert_eq!(message["type"], "next", "{message}");
    assert!(message["payload"]["errors"].is_null(), "{message}");
    message["payload"]["data"]["endpointStateChanged"].clone()
}

/// Runs the worker until nothing more is claimable; how many requests it made.
async fn drain(worker: &Arc<hymical_forms::testing::delivery::Worker>) -> usize {
    let mut claimed = 0;
    loop {
        let n = worker.run_once().await.unwrap();
        if n == 0 {
            return claimed;
        }
        claimed += n;
    }
}

async fn submit_many(app: &TestApp, endpoint: &str, n: usize) {
    for i in 0..n {
        app.submit(endpoint, &format!("n={i}")).await;
    }
}

/// While paused: every submission is accepted and queued, nothing is claimed, no attempt
/// is spent. Resumed: all of them delivered on their first attempt (their whole
/// allowance left), the endpoint running again.
async fn held_then_delivered(
    app: &TestApp,
    key: &str,
    endpoint: &str,
    receiver: &Receiver,
    worker: &Arc<hymical_forms::testing::delivery::Worker>,
    events: &mut WsClient,
) {
    let requests_before = receiver.received().len();
    let first_time_delivered = format!(
        "SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = '{endpoint}'
           AND state = 'delivered' AND attempts = 1 AND cycle_attempts = 1"
    );
    let delivered_before = app.db.count(&first_time_delivered).await;
    let attempts_before = app
        .db
        .count("SELECT count(*) AS n FROM delivery_attempts")
        .await;
    submit_many(app, endpoint, 50).await;
    assert_eq!(
        worker.run_once().await.unwrap(),
        0,
        "nothing is claimed while paused"
    );
    let held = app
        .db
        .count(&format!(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = '{endpoint}'
               AND state = 'pending' AND attempts = 0 AND cycle_attempts = 0"
        ))
        .await;
    assert_eq!(held, 50);
    assert_eq!(receiver.received().len(), requests_before);
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM delivery_attempts")
            .await,
        attempts_before
    );

    receiver.gone.store(false, Ordering::SeqCst);
    receiver.failing.store(false, Ordering::SeqCst);
    let resumed = app
        .gql(
            key,
            "mutation($id: ID!) { resumeEndpoint(endpointId: $id) { heldDeliveries endpoint { deliveryState pauseReason pausedAt consecutiveFailedDeliveries } } }",
            json!({ "id": endpoint }),
        )
        .await;
    assert_eq!(
        resumed["data"]["resumeEndpoint"],
        json!({ "heldDeliveries": 50, "endpoint": { "deliveryState": "RUNNING", "pauseReason": null, "pausedAt": null, "consecutiveFailedDeliveries": 0 } }),
        "{resumed}"
    );
    let event = next_endpoint_event(events).await;
    assert_eq!(
        (event["kind"].as_str(), event["endpointId"].as_str()),
        (Some("RESUMED"), Some(endpoint))
    );
    assert_eq!(drain(worker).await, 50);
    assert_eq!(
        app.db.count(&first_time_delivered).await,
        delivered_before + 50
    );
    assert_eq!(receiver.received().len(), requests_before + 50);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_answering_410_pauses_its_endpoint_until_an_operator_resumes_it() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("pause").await;
    app.webhook_endpoint("gone-away", &receiver.url("/gone"))
        .await;
    app.webhook_endpoint("bystander", &receiver.url("/hook"))
        .await;
    let mut events = subscribe_endpoint_events(&app, &key, "gone-away").await;
    let worker = app.worker(None);

    app.submit("gone-away", "first=1").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    // The 410 itself is final, as every 4xx but 408/425/429 (docs/delivery.md): on record,
    // failed, replayable. Its endpoint pauses, with why and since when.
    let first = app.db.deliveries().await.remove(0);
    assert_eq!((first.state.as_str(), first.attempts), ("failed", 1));
    let state = until_endpoint(&app, &key, "gone-away", "deliveryState", json!("PAUSED")).await;
    assert_eq!(state["pauseReason"], "GONE");
    assert!(state["pausedAt"].is_string());
    let event = next_endpoint_event(&mut events).await;
    assert_eq!(event["kind"], "PAUSED", "{event}");
    assert_eq!(event["reason"], "GONE");
    assert_eq!(event["endpoint"]["deliveryState"], "PAUSED");

    // Another endpoint is not held up.
    app.submit("bystander", "other=1").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);

    // Counted in the metrics; resuming by hand when not paused changes nothing.
    let metrics = app
        .http
        .get(app.url("/metrics"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("hymical_endpoint_pauses_total{reason=\"gone\"}"),
        "{metrics}"
    );
    // The gauge is the scraped database's figure, but the recorder is the test process's,
    // shared with concurrent tests: its presence is what this can check.
    assert!(metrics.contains("hymical_endpoints_paused "), "{metrics}");

    held_then_delivered(&app, &key, "gone-away", &receiver, &worker, &mut events).await;
    let not_paused = app
        .gql(
            &key,
            "mutation { resumeEndpoint(endpointId: \"gone-away\") { heldDeliveries endpoint { deliveryState } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        not_paused["data"]["resumeEndpoint"]["heldDeliveries"], 0,
        "{not_paused}"
    );
    events.quiet_for(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_of_failed_deliveries_pauses_its_endpoint_and_a_delivery_restarts_the_run() {
    let receiver = Receiver::start().await;
    let vars = [
        DEV,
        &[
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "1"),
            ("FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES", "3"),
        ],
    ]
    .concat();
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("threshold").await;
    app.webhook_endpoint("flaky", &receiver.url("/failing"))
        .await;
    let mut events = subscribe_endpoint_events(&app, &key, "flaky").await;
    let worker = app.worker(None);

    // Two failed, then one delivered: the run starts again.
    for expected in [1, 2] {
        app.submit("flaky", "try=1").await;
        assert_eq!(worker.run_once().await.unwrap(), 1);
        until_endpoint(
            &app,
            &key,
            "flaky",
            "consecutiveFailedDeliveries",
            json!(expected),
        )
        .await;
    }
    receiver.failing.store(false, Ordering::SeqCst);
    app.submit("flaky", "try=ok").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    until_endpoint(&app, &key, "flaky", "consecutiveFailedDeliveries", json!(0)).await;

    // Three failed in a row: paused.
    receiver.failing.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        app.submit("flaky", "try=2").await;
        assert_eq!(worker.run_once().await.unwrap(), 1);
    }
    let state = until_endpoint(&app, &key, "flaky", "deliveryState", json!("PAUSED")).await;
    assert_eq!(state["pauseReason"], "FAILURE_THRESHOLD");
    assert_eq!(state["consecutiveFailedDeliveries"], 3);
    let event = next_endpoint_event(&mut events).await;
    assert_eq!(
        (event["kind"].as_str(), event["reason"].as_str()),
        (Some("PAUSED"), Some("FAILURE_THRESHOLD"))
    );

    held_then_delivered(&app, &key, "flaky", &receiver, &worker, &mut events).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn operators_pause_and_resume_by_hand() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("hand").await;
    app.webhook_endpoint("by-hand", &receiver.url("/hook"))
        .await;
    let mut events = subscribe_endpoint_events(&app, &key, "by-hand").await;
    let worker = app.worker(None);

    let paused = app
        .gql(
            &key,
            "mutation { pauseEndpoint(endpointId: \"by-hand\") { endpoint { deliveryState pauseReason pausedAt } } }",
            json!({}),
        )
        .await;
    let endpoint = &paused["data"]["pauseEndpoint"]["endpoint"];
    assert_eq!(
        (
            endpoint["deliveryState"].as_str(),
            endpoint["pauseReason"].as_str()
        ),
        (Some("PAUSED"), Some("OPERATOR")),
        "{paused}"
    );
    let since = endpoint["pausedAt"].clone();
    let event = next_endpoint_event(&mut events).await;
    assert_eq!(
        (event["kind"].as_str(), event["reason"].as_str()),
        (Some("PAUSED"), Some("OPERATOR"))
    );

    // Pausing again keeps the first pause (its time) and writes no event.
    let again = app
        .gql(
            &key,
            "mutation { pauseEndpoint(endpointId: \"by-hand\") { endpoint { pausedAt } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        again["data"]["pauseEndpoint"]["endpoint"]["pausedAt"],
        since
    );
    let unknown = app
        .gql(
            &key,
            "mutation { pauseEndpoint(endpointId: \"nobody\") { endpoint { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        unknown["errors"][0]["extensions"]["code"], "ENDPOINT_NOT_FOUND",
        "{unknown}"
    );

    held_then_delivered(&app, &key, "by-hand", &receiver, &worker, &mut events).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_an_endpoint_is_refused_while_it_owes_and_keeps_or_erases_its_history() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("delete").await;
    app.webhook_endpoint("doomed", &receiver.url("/hook")).await;
    app.webhook_endpoint("neighbour", &receiver.url("/hook"))
        .await;
    let mut events = subscribe_endpoint_events(&app, &key, "doomed").await;
    let worker = app.worker(None);

    // History for both endpoints, then two deliveries still owed by the doomed one.
    app.submit("doomed", "old=1").await;
    app.submit("neighbour", "old=1").await;
    assert_eq!(drain(&worker).await, 2);
    app.submit("doomed", "owed=1").await;
    app.submit("doomed", "owed=2").await;
    let neighbour_rows = "SELECT (SELECT count(*) FROM submissions WHERE endpoint_id = 'neighbour')
        + (SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = 'neighbour')
        + (SELECT count(*) FROM delivery_events WHERE endpoint_id = 'neighbour')
        + (SELECT count(*) FROM delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = 'neighbour') AS n";
    let neighbour_before = app.db.count(neighbour_rows).await;

    const DELETE: &str = "mutation($input: DeleteEndpointInput!) { deleteEndpoint(input: $input) { deletedEndpointId history cancelledDeliveries } }";
    let refused = app
        .gql(
            &key,
            DELETE,
            json!({ "input": { "id": "doomed", "history": "KEEP" } }),
        )
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "ENDPOINT_HAS_DELIVERIES_IN_PROGRESS",
        "{refused}"
    );
    assert_eq!(
        refused["errors"][0]["extensions"]["details"],
        json!({ "endpoint_id": "doomed", "pending": 2, "processing": 0 })
    );
    assert_eq!(
        endpoint_state(&app, &key, "doomed").await["deliveryState"],
        "RUNNING"
    );
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = 'doomed' AND state = 'pending'").await,
        2
    );
    // The choice is not optional.
    let no_choice = app
        .gql(&key, DELETE, json!({ "input": { "id": "doomed" } }))
        .await;
    assert!(
        no_choice["errors"].is_array() && no_choice["data"].is_null(),
        "{no_choice}"
    );

    // Keep, cancelling what was owed: a tombstone with all its history.
    let kept = app
        .gql(
            &key,
            DELETE,
            json!({ "input": { "id": "doomed", "history": "KEEP", "cancelDeliveries": true } }),
        )
        .await;
    assert_eq!(
        kept["data"]["deleteEndpoint"],
        json!({ "deletedEndpointId": "doomed", "history": "KEEP", "cancelledDeliveries": 2 }),
        "{kept}"
    );
    let event = next_endpoint_event(&mut events).await;
    assert_eq!(event["kind"], "DELETED", "{event}");
    let tombstone = endpoint_state(&app, &key, "doomed").await;
    assert_eq!(tombstone["deliveryState"], "DELETED");
    assert!(
        tombstone["deletedAt"].is_string() && tombstone["webhookUrl"].is_null(),
        "{tombstone}"
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM submissions WHERE endpoint_id = 'doomed'")
            .await,
        3
    );
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = 'doomed' AND state = 'failed' AND completed_at IS NOT NULL").await,
        2
    );
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM delivery_events WHERE endpoint_id = 'doomed' AND kind = 'cancelled' AND previous_state = 'pending'").await,
        2
    );
    assert_eq!(app.db.count("SELECT count(*) AS n FROM delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = 'doomed'").await, 1);
    // Listed only when asked for; intake no longer knows it; the id stays taken.
    let listed = app
        .gql(&key, "{ all: endpoints(first: 10, includeDeleted: true) { edges { node { id } } } live: endpoints(first: 10) { edges { node { id } } } }", json!({}))
        .await;
    let ids = |which: &str| -> Vec<String> {
        listed["data"][which]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["node"]["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(ids("all").contains(&"doomed".to_string()), "{listed}");
    assert!(!ids("live").contains(&"doomed".to_string()), "{listed}");
    let posted = app
        .post_form(
            "doomed",
            Some("application/x-www-form-urlencoded"),
            "a=1",
            &[],
        )
        .await;
    assert_eq!(posted.status(), 404);
    let body: Value = posted.json().await.unwrap();
    assert_eq!(body["error"]["code"], "endpoint_not_found");
    let reused = app
        .gql(
            &key,
            "mutation { createEndpoint(input: { id: \"doomed\", name: \"Again\" }) { endpoint { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        reused["errors"][0]["extensions"]["code"], "ENDPOINT_DELETED",
        "{reused}"
    );
    for change in [
        "mutation { updateEndpoint(input: { id: \"doomed\", name: \"x\" }) { endpoint { id } } }",
        "mutation { pauseEndpoint(endpointId: \"doomed\") { endpoint { id } } }",
        "mutation { resumeEndpoint(endpointId: \"doomed\") { heldDeliveries } }",
    ] {
        let answer = app.gql(&key, change, json!({})).await;
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], "ENDPOINT_DELETED",
            "{change}: {answer}"
        );
    }
    let again = app
        .gql(
            &key,
            DELETE,
            json!({ "input": { "id": "doomed", "history": "KEEP" } }),
        )
        .await;
    assert_eq!(
        again["errors"][0]["extensions"]["code"], "ENDPOINT_DELETED",
        "{again}"
    );
    // Its cancelled deliveries cannot be replayed, one by one or in bulk.
    let cancelled: Vec<String> = app
        .db
        .deliveries()
        .await
        .into_iter()
        .filter(|d| d.state == "failed")
        .map(|d| d.id)
        .collect();
    let replay = app
        .gql(
            &key,
            "mutation($id: ID!) { replayDelivery(id: $id) { delivery { id } } }",
            json!({ "id": cancelled[0] }),
        )
        .await;
    assert_eq!(
        replay["errors"][0]["extensions"]["code"], "DELIVERY_NOT_REPLAYABLE",
        "{replay}"
    );
    assert_eq!(
        replay["errors"][0]["extensions"]["details"]["reason"],
        "endpoint_deleted"
    );
    let bulk = app
        .gql(
            &key,
            "mutation { replayDeliveries(filter: {}) { count } }",
            json!({}),
        )
        .await;
    assert_eq!(bulk["data"]["replayDeliveries"]["count"], 0, "{bulk}");

    // Erase the tombstone: everything of it goes, nothing of the neighbour's, and the id
    // is free again.
    let erased = app
        .gql(
            &key,
            DELETE,
            json!({ "input": { "id": "doomed", "history": "ERASE" } }),
        )
        .await;
    assert_eq!(
        erased["data"]["deleteEndpoint"]["cancelledDeliveries"], 0,
        "{erased}"
    );
    let event = next_endpoint_event(&mut events).await;
    assert_eq!(event["kind"], "DELETED", "{event}");
    assert!(event["endpoint"].is_null(), "{event}");
    let doomed_rows = "SELECT (SELECT count(*) FROM endpoints WHERE id = 'doomed')
        + (SELECT count(*) FROM submissions WHERE endpoint_id = 'doomed')
        + (SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = 'doomed')
        + (SELECT count(*) FROM delivery_events WHERE endpoint_id = 'doomed')
        + (SELECT count(*) FROM delivery_state_counts WHERE endpoint_id = 'doomed')
        + (SELECT count(*) FROM endpoint_events WHERE endpoint_id = 'doomed' AND id < (SELECT max(id) FROM endpoint_events)) AS n";
    assert_eq!(app.db.count(doomed_rows).await, 0);
    assert_eq!(app.db.count("SELECT count(*) AS n FROM delivery_attempts WHERE delivery_id NOT IN (SELECT id FROM webhook_deliveries)").await, 0);
    assert_eq!(app.db.count(neighbour_rows).await, neighbour_before);
    let counts = app
        .gql(&key, "{ deliveryCounts { delivered failed } }", json!({}))
        .await;
    assert_eq!(
        counts["data"]["deliveryCounts"],
        json!({ "delivered": 1, "failed": 0 }),
        "{counts}"
    );
    let created = app
        .gql(
            &key,
            "mutation { createEndpoint(input: { id: \"doomed\", name: \"Reborn\" }) { endpoint { id deliveryState } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        created["data"]["createEndpoint"]["endpoint"]["deliveryState"], "RUNNING",
        "{created}"
    );

    // An endpoint with only finished history is erased at once, no cancelling needed.
    let erased = app
        .gql(
            &key,
            DELETE,
            json!({ "input": { "id": "neighbour", "history": "ERASE" } }),
        )
        .await;
    assert_eq!(
        erased["data"]["deleteEndpoint"]["history"], "ERASE",
        "{erased}"
    );
    assert_eq!(app.db.count(neighbour_rows).await, 0);
    let unknown = app
        .gql(
            &key,
            DELETE,
            json!({ "input": { "id": "nobody", "history": "ERASE" } }),
        )
        .await;
    assert_eq!(
        unknown["errors"][0]["extensions"]["code"], "ENDPOINT_NOT_FOUND",
        "{unknown}"
    );
}

/// A form accepted while its endpoint is being deleted (another process's intake found it
/// in its cache): intake's key-share lock waits for the delete, reads the endpoint again,
/// and queues no delivery for the endpoint deleted meanwhile; its submission is kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_form_accepted_during_a_delete_queues_no_delivery_for_the_deleted_endpoint() {
    use diesel_async::{AsyncConnection, RunQueryDsl};
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    app.webhook_endpoint("racing", &receiver.url("/hook")).await;
    // Intake holds the endpoint in its cache from here on.
    app.submit("racing", "before=1").await;

    // The delete's transaction, by hand: the row locked as deleteEndpoint locks it.
    let mut deleting = app.db.connect().await;
    let (locked, go) = tokio::sync::oneshot::channel::<()>();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let delete = tokio::spawn(async move {
        deleting
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                diesel::sql_query("SELECT id FROM endpoints WHERE id = 'racing' FOR UPDATE")
                    .execute(conn)
                    .await?;
                let _ = locked.send(());
                let _ = released.await;
                diesel::sql_query(
                    "UPDATE endpoints SET deleted_at = now(), is_active = false,
                         webhook_url = NULL, webhook_secret = NULL WHERE id = 'racing'",
                )
                .execute(conn)
                .await?;
                Ok(())
            })
            .await
            .unwrap();
    });
    go.await.unwrap();
    let posting = {
        let http = app.http.clone();
        let url = app.url("/f/racing");
        tokio::spawn(async move {
            http.post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body("during=1")
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    app.db.until_waiting_for_locks(1).await;
    let _ = release.send(());
    delete.await.unwrap();
    assert_eq!(posting.await.unwrap(), 202);
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM submissions WHERE endpoint_id = 'racing'")
            .await,
        2
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = 'racing'")
            .await,
        1,
        "only the delivery accepted before the delete"
    );
}
