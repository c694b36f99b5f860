//! GraphQL subscriptions at `/graphql/ws`: the protocol's rules probed
//! over raw WebSockets, the events of a delivery's life, filters, resume, commit order,
//! revocation and pruning.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::ManualClock;
use serde_json::{json, Value};

use support::harness::TestApp;
use support::receiver::Receiver;
use support::ws_client::{event_id, expected as t, transition, Frame, WsClient};

const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1"),
    ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "1"),
];

async fn app() -> TestApp {
    TestApp::start_with(DEV, Arc::new(hymical_forms::testing::clock::SystemClock)).await
}

fn ws_url(app: &TestApp) -> String {
    format!("ws://{}/graphql/ws", app.addr)
}

const SHORT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread")]
async fn each_protocol_rule_has_its_close_code() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    let url = ws_url(&app);

    // 4400: not JSON, no type, an unknown type, a binary frame, a subscribe without id.
    for bad in [
        "not json",
        "[]",
        r#"{"payload":{}}"#,
        r#"{"type":"start","id":"1"}"#,
    ] {
        let mut client = WsClient::connect(&url, "graphql-transport-ws").await;
        client.send_text(bad).await;
        let (code, reason) = client.closed(SHORT).await;
        assert_eq!(code, 4400, "{bad}: {reason}");
    }
    let mut client = WsClient::ready(&url, &key).await;
    client
        .send(json!({ "type": "subscribe", "payload": { "query": "{ __typename }" } }))
        .await;
    assert_eq!(client.closed(SHORT).await.0, 4400);

    // 4401: subscribe before the acknowledgement.
    let mut client = WsClient::connect(&url, "graphql-transport-ws").await;
    client.subscribe_events("1", "").await;
    assert_eq!(client.closed(SHORT).await, (4401, "Unauthorized".into()));

    // 4403: a wrong, a malformed and a missing key.
    for payload in [
        json!({ "Authorization": "Bearer hym_live_0000000000000000000000000000000000000000000" }),
        json!({ "Authorization": "Basic abc" }),
        json!({}),
    ] {
        let mut client = WsClient::connect(&url, "graphql-transport-ws").await;
        client
            .send(json!({ "type": "connection_init", "payload": payload }))
            .await;
        assert_eq!(client.closed(SHORT).await, (4403, "Forbidden".into()));
    }

    // 4429: a second connection_init.
    let mut client = WsClient::ready(&url, &key).await;
    client.init(&key).await;
    assert_eq!(
        client.closed(SHORT).await,
        (4429, "Too many initialisation requests".into())
    );

    // 4409: an id already running.
    let mut client = WsClient::ready(&url, &key).await;
    client.subscribe_events("dup", "").await;
    client.subscribe_events("dup", "").await;
    assert_eq!(
        client.closed(SHORT).await,
        (4409, "Subscriber for dup already exists".into())
    );

    // A long id quoted in the reason: the reason is cut to what a close frame holds, so the
    // client still reads 4409 (a longer one would be an invalid frame, seen as 1006).
    let long_id = "é".repeat(150);
    let mut client = WsClient::ready(&url, &key).await;
    client.subscribe_events(&long_id, "").await;
    client.subscribe_events(&long_id, "").await;
    let (code, reason) = client.closed(SHORT).await;
    assert_eq!(code, 4409, "{reason}");
    assert!(
        reason.len() <= 123 && reason.starts_with("Subscriber for éé"),
        "{reason}"
    );

    // ping → pong with the payload, before and after the acknowledgement.
    let mut client = WsClient::connect(&url, "graphql-transport-ws").await;
    client
        .send(json!({ "type": "ping", "payload": { "n": 1 } }))
        .await;
    assert_eq!(
        client.next_json().await,
        json!({ "type": "pong", "payload": { "n": 1 } })
    );
    client.init(&key).await;
    assert_eq!(client.next_json().await["type"], "connection_ack");
    client.send(json!({ "type": "ping" })).await;
    assert_eq!(client.next_json().await, json!({ "type": "pong" }));

    // A validation error is an `error` message for that operation; the socket stays open.
    client
        .send(json!({ "type": "subscribe", "id": "v", "payload": { "query": "subscription { nope }" } }))
        .await;
    let error = client.next_json().await;
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["id"], "v");
    assert!(error["payload"][0]["message"].is_string(), "{error}");
    // Queries work too: one `next`, then `complete`.
    client
        .send(json!({ "type": "subscribe", "id": "q", "payload": { "query": "{ __typename }" } }))
        .await;
    assert_eq!(
        client.next_json().await,
        json!({ "type": "next", "id": "q", "payload": { "data": { "__typename": "Query" } } })
    );
    assert_eq!(
        client.next_json().await,
        json!({ "type": "complete", "id": "q" })
    );
    // The operation is over, so its id may be used again.
    client
        .send(json!({ "type": "subscribe", "id": "q", "payload": { "query": "{ __typename }" } }))
        .await;
    assert_eq!(client.next_json().await["type"], "next");
    assert_eq!(client.next_json().await["type"], "complete");

    // A bad afterEventId is an error result of that operation, with the catalogue code.
    client.subscribe_events("bad", r#"afterEventId: "x""#).await;
    let refused = client.next_json().await;
    assert_eq!(refused["type"], "next", "{refused}");
    assert_eq!(
        refused["payload"]["errors"][0]["extensions"]["code"],
        "INVALID_INPUT"
    );
    assert_eq!(
        client.next_json().await,
        json!({ "type": "complete", "id": "bad" })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_without_init_is_closed_after_ten_seconds() {
    let app = app().await;
    let mut client = WsClient::connect(&ws_url(&app), "graphql-transport-ws").await;
    // A ping does not count as initialisation.
    client.send(json!({ "type": "ping" })).await;
    assert_eq!(client.next_json().await["type"], "pong");
    let started = std::time::Instant::now();
    let (code, reason) = client.closed(Duration::from_secs(20)).await;
    assert_eq!(
        (code, reason.as_str()),
        (4408, "Connection initialisation timeout")
    );
    assert!(started.elapsed() < Duration::from_secs(11));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_subprotocol_is_the_clients_first_choice_and_frames_follow_it() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    let url = ws_url(&app);
    let subscription = json!({ "query": r#"subscription { deliveryStateChanged(afterEventId: "0") { id state } }"# });

    let modern = WsClient::connect(&url, "graphql-transport-ws, graphql-ws").await;
    assert_eq!(modern.protocol.as_deref(), Some("graphql-transport-ws"));
    modern.close().await;

    // Legacy first: acknowledgement plus keep-alive, start/data/stop, and the modern
    // protocol's messages are not understood.
    let mut legacy = WsClient::connect(&url, "graphql-ws, graphql-transport-ws").await;
    assert_eq!(legacy.protocol.as_deref(), Some("graphql-ws"));
    legacy.init(&key).await;
    assert_eq!(legacy.next_json().await["type"], "connection_ack");
    assert_eq!(legacy.next_json().await["type"], "ka");
    legacy
        .send(json!({ "type": "start", "id": "1", "payload": subscription }))
        .await;
    legacy
        .send(json!({ "type": "start", "id": "2", "payload": { "query": "{ __typename }" } }))
        .await;
    assert_eq!(
        legacy.next_non_ka().await,
        json!({ "type": "data", "id": "2", "payload": { "data": { "__typename": "Query" } } })
    );
    assert_eq!(
        legacy.next_non_ka().await,
        json!({ "type": "complete", "id": "2" })
    );
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    app.submit("contact", "a=1").await;
    let data = legacy.next_non_ka().await;
    assert_eq!(data["type"], "data", "{data}");
    assert_eq!(data["id"], "1");
    assert_eq!(
        data["payload"]["data"]["deliveryStateChanged"]["state"],
        "PENDING"
    );
    legacy.send(json!({ "type": "stop", "id": "1" })).await;
    legacy.send(json!({ "type": "ping" })).await;
    assert_eq!(legacy.closed(SHORT).await.0, 4400);

    // A bad key under the legacy protocol: connection_error, then 4403.
    let mut legacy = WsClient::connect(&url, "graphql-ws").await;
    legacy.init("hym_live_nope").await;
    assert_eq!(legacy.next_json().await["type"], "connection_error");
    assert_eq!(legacy.closed(SHORT).await.0, 4403);

    // `subscribe` is not a legacy message; `start` is not a modern one.
    let mut legacy = WsClient::connect(&url, "graphql-ws").await;
    legacy.init(&key).await;
    assert_eq!(legacy.next_json().await["type"], "connection_ack");
    legacy
        .send(json!({ "type": "subscribe", "id": "1", "payload": subscription }))
        .await;
    assert_eq!(legacy.closed(SHORT).await.0, 4400);

    // Neither protocol offered.
    let mut none = WsClient::connect(&url, "").await;
    assert_eq!(none.protocol, None);
    assert_eq!(none.closed(SHORT).await.0, 4406);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_emits_each_state_change_once_in_order() {
    let receiver = Receiver::start().await;
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", &receiver.url("/status/500"))
        .await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    client.subscribe_events("all", r#"afterEventId: "0""#).await;
    app.submit("contact", "a=1").await;
    let worker = app.worker(None);
    worker.run_once().await.expect("first attempt");
    let events = client.events("all", 3).await;
    assert_eq!(
        events.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "null", "CREATED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("PENDING", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    assert_eq!(events[2]["outcome"], "HTTP_ERROR");
    assert_eq!(
        (
            events[2]["attempts"].clone(),
            events[2]["cycleAttempts"].clone()
        ),
        (json!(1), json!(1))
    );
    assert_eq!(events[0]["endpointId"], "contact");
    let delivery_id = events[0]["delivery"]["id"].as_str().unwrap().to_string();
    assert!(events.iter().all(|e| e["delivery"]["id"] == delivery_id));
    let ids: Vec<i64> = events.iter().map(event_id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let delivery = app.db.delivery(&delivery_id).await;
    assert_eq!(delivery.attempts, 1);
    client.quiet_for(Duration::from_millis(300)).await;
}

/// Sockets read with a small buffer (4 KiB); a client message larger than it still
/// arrives whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_larger_than_the_read_buffer_arrives_whole() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "https://receiver.example/hook")
        .await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    // A comment of 40 KB before the document: ten times the read buffer.
    let query = format!(
        "#{}\nsubscription {{ deliveryStateChanged(afterEventId: \"0\") {{ id kind }} }}",
        "x".repeat(40_000)
    );
    client
        .send(json!({ "type": "subscribe", "id": "big", "payload": { "query": query } }))
        .await;
    app.submit("contact", "a=1").await;
    assert_eq!(client.next_event("big").await["kind"], "CREATED");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_delivery_replayed_starts_a_new_cycle_of_events() {
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
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", &receiver.url("/status/503"))
        .await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    app.submit("contact", "a=1").await;
    let delivery_id = app.db.deliveries().await[0].id.clone();
    // From the start of history: the CREATED event that came before the subscription.
    client
        .subscribe_events(
            "d",
            &format!(r#"deliveryId: "{delivery_id}", afterEventId: "0""#),
        )
        .await;
    let worker = app.worker(None);
    worker.run_once().await.expect("attempt 1");
    clock.advance(chrono::Duration::seconds(60));
    worker.run_once().await.expect("attempt 2");
    let first_cycle = client.events("d", 5).await;
    assert_eq!(
        first_cycle.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "null", "CREATED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("PENDING", "PROCESSING", "ATTEMPT_RECORDED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("FAILED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    let replayed = app
        .gql(
            &key,
            "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state } } }",
            json!({ "id": delivery_id }),
        )
        .await;
    assert_eq!(
        replayed["data"]["replayDelivery"]["delivery"]["state"], "PENDING",
        "{replayed}"
    );
    let replay = client.next_event("d").await;
    assert_eq!(transition(&replay), t("PENDING", "FAILED", "REPLAYED"));
    assert_eq!(
        (replay["attempts"].clone(), replay["cycleAttempts"].clone()),
        (json!(2), json!(0))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn filters_deliver_only_what_they_match() {
    let receiver = Receiver::start().await;
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("fine", &receiver.url("/status/200"))
        .await;
    app.webhook_endpoint("gone", &receiver.url("/status/410"))
        .await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    let after = r#"afterEventId: "0""#;
    client.subscribe_events("everything", after).await;
    client
        .subscribe_events("endpoint", &format!(r#"endpointId: "gone", {after}"#))
        .await;
    client
        .subscribe_events("failed", &format!("states: [FAILED], {after}"))
        .await;
    client
        .subscribe_events("settled", &format!("states: [DELIVERED, FAILED], {after}"))
        .await;
    client
        .subscribe_events("none", &format!("states: [], {after}"))
        .await;
    app.submit("fine", "a=1").await;
    let first = client.next_event("everything").await;
    let delivery_id = first["delivery"]["id"].as_str().unwrap().to_string();
    client
        .subscribe_events(
            "one",
            &format!(
                r#"deliveryId: "{delivery_id}", afterEventId: "{}""#,
                event_id(&first) - 1
            ),
        )
        .await;
    app.submit("gone", "a=1").await;
    app.worker(None).run_once().await.expect("deliver both");
    // 2 deliveries × (created, claimed, recorded) = 6 events; the first was read above.
    let mut seen: std::collections::HashMap<String, Vec<Value>> = Default::default();
    seen.entry("everything".into()).or_default().push(first);
    let expected = [
        ("everything", 6),
        ("endpoint", 3),
        ("failed", 1),
        ("settled", 2),
        ("one", 3),
    ];
    let total: usize = expected.iter().map(|(_, n)| n).sum();
    let mut received = 1;
    while received < total {
        let message = client.next_json().await;
        assert_eq!(message["type"], "next", "{message}");
        let id = message["id"].as_str().unwrap().to_string();
        seen.entry(id)
            .or_default()
            .push(message["payload"]["data"]["deliveryStateChanged"].clone());
        received += 1;
    }
    client.quiet_for(Duration::from_millis(300)).await;
    for (operation, count) in expected {
        assert_eq!(
            seen.get(operation).map_or(0, Vec::len),
            count,
            "{operation}: {seen:?}"
        );
    }
    assert!(seen["endpoint"].iter().all(|e| e["endpointId"] == "gone"));
    assert!(seen["failed"].iter().all(|e| e["state"] == "FAILED"));
    assert!(seen["one"]
        .iter()
        .all(|e| e["delivery"]["id"] == delivery_id));
    assert_eq!(
        seen["settled"]
            .iter()
            .map(|e| e["state"].as_str().unwrap())
            .collect::<std::collections::BTreeSet<_>>(),
        ["DELIVERED", "FAILED"].into_iter().collect()
    );
    assert!(!seen.contains_key("none"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_subscription_gets_exactly_what_it_missed_then_live_events() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    let url = ws_url(&app);
    let mut client = WsClient::ready(&url, &key).await;
    client.subscribe_events("s", r#"afterEventId: "0""#).await;
    app.submit("contact", "n=0").await;
    let last_seen = event_id(&client.next_event("s").await);
    client.close().await;

    // 50 changes while disconnected.
    for n in 1..=50 {
        app.submit("contact", &format!("n={n}")).await;
    }
    let mut client = WsClient::ready(&url, &key).await;
    client
        .subscribe_events("s", &format!(r#"afterEventId: "{last_seen}""#))
        .await;
    let missed = client.events("s", 50).await;
    let ids: Vec<i64> = missed.iter().map(event_id).collect();
    assert!(ids[0] > last_seen);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let stored: Vec<i64> = {
        use diesel::{ExpressionMethods, QueryDsl};
        use hymical_forms::testing::db::schema::delivery_events::dsl::*;
        let mut conn = app.db.connect().await;
        delivery_events
            .filter(id.gt(last_seen))
            .order(id.asc())
            .select(id)
            .load(&mut conn)
            .await
            .unwrap()
    };
    assert_eq!(ids, stored, "exactly the events committed meanwhile");
    // Then live, with no duplicate of what was replayed.
    app.submit("contact", "n=51").await;
    let live = client.next_event("s").await;
    assert!(event_id(&live) > *ids.last().unwrap());
    client.quiet_for(Duration::from_millis(300)).await;
}

/// Two queued deliveries on two endpoints (a claim holds the endpoints it takes from until
/// it commits, so a second claim can run while the first is open only on another
/// endpoint), and a subscriber from the newest event on: the app, the subscriber, and the
/// two submission ids.
async fn two_queued_and_a_subscriber() -> (TestApp, WsClient, String, String) {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    app.webhook_endpoint("other", "http://127.0.0.1:9/hook")
        .await;
    let first = app.submit("contact", "a=1").await;
    let second = app.submit("other", "a=2").await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    let after = app.db.newest_event_id().await;
    client
        .subscribe_events("s", &format!(r#"afterEventId: "{after}""#))
        .await;
    (app, client, first, second)
}

/// The next two events are the claims of `submissions`' deliveries, in id order.
/// The one delivery a claim took is of `submission`.
fn assert_claimed(
    claimed: &[hymical_forms::testing::db::models::ClaimedDelivery],
    submission: &str,
) {
    assert_eq!(
        claimed[0].submission_id.as_ref().map(|id| id.as_str()),
        Some(submission)
    );
}

async fn assert_claims_sent_in_id_order(
    app: &TestApp,
    client: &mut WsClient,
    submissions: [String; 2],
) {
    let events = client.events("s", 2).await;
    let ids: Vec<i64> = events.iter().map(event_id).collect();
    assert!(ids[0] < ids[1], "{ids:?}");
    let mut sent = Vec::new();
    for event in &events {
        let delivery = event["delivery"]["id"].as_str().unwrap();
        sent.push(
            app.db
                .delivery(delivery)
                .await
                .submission_id
                .unwrap_or_default(),
        );
    }
    assert_eq!(sent, submissions);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_committed_late_with_a_smaller_id_is_not_overtaken() {
    // Transaction A takes event id n and stays open; B takes n + 1 and commits. The feed
    // must hold n + 1 back until A ends, then send n before n + 1 (otherwise a subscriber
    // resuming after n + 1 would never see n).
    let (app, mut client, first, second) = two_queued_and_a_subscriber().await;
    // Connections of the service's own (it names itself, and the feed waits only for the
    // transactions of its own connections to this database).
    let mut a = app.db.connect_as_service().await;
    let mut b = app.db.connect_as_service().await;
    let (now, lease) = (chrono::Utc::now(), Duration::from_secs(60));
    // A claims the first delivery (the earlier due) inside an open transaction…
    diesel::sql_query("BEGIN").execute(&mut a).await.unwrap();
    let claimed_by_a = support::harness::claim_at(&mut a, now, lease, 1)
        .await
        .unwrap();
    // …B claims the second (skipping A's locked row) and commits at once.
    let claimed_by_b = support::harness::claim_at(&mut b, now, lease, 1)
        .await
        .unwrap();
    assert_claimed(&claimed_by_a, &first);
    assert_claimed(&claimed_by_b, &second);
    // The feed reads B's event several times while A is open: nothing may be sent.
    client.quiet_for(Duration::from_millis(500)).await;
    diesel::sql_query("COMMIT").execute(&mut a).await.unwrap();
    assert_claims_sent_in_id_order(&app, &mut client, [first, second]).await;
}

/// The same, when the transaction holding the smaller id is the younger one: B takes its
/// transaction id after A's, then event id n; A takes n + 1 and commits. A snapshot now
/// lists nothing as running below its `xmax` (A's id + 1), and B, above it, is running
/// unlisted. An earlier reader trusted "nothing listed" and sent n + 1 without n.
#[tokio::test(flavor = "multi_thread")]
async fn a_younger_transaction_holding_a_smaller_id_is_not_overtaken() {
    let (app, mut client, first, second) = two_queued_and_a_subscriber().await;
    let mut a = app.db.connect_as_service().await;
    let mut b = app.db.connect_as_service().await;
    let (now, lease) = (chrono::Utc::now(), Duration::from_secs(60));
    // Transaction ids in this order: A's, then B's.
    for conn in [&mut a, &mut b] {
        diesel::sql_query("BEGIN").execute(conn).await.unwrap();
        diesel::sql_query("SELECT pg_current_xact_id()")
            .execute(conn)
            .await
            .unwrap();
    }
    // B claims the first delivery (event id n) and stays open…
    let claimed_by_b = support::harness::claim_at(&mut b, now, lease, 1)
        .await
        .unwrap();
    // …A claims the second (n + 1) and commits.
    let claimed_by_a = support::harness::claim_at(&mut a, now, lease, 1)
        .await
        .unwrap();
    diesel::sql_query("COMMIT").execute(&mut a).await.unwrap();
    assert_claimed(&claimed_by_b, &first);
    assert_claimed(&claimed_by_a, &second);
    // The feed reads A's event several times while B is open: nothing may be sent.
    client.quiet_for(Duration::from_millis(500)).await;
    diesel::sql_query("COMMIT").execute(&mut b).await.unwrap();
    assert_claims_sent_in_id_order(&app, &mut client, [first, second]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolled_back_change_emits_nothing() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    let submission = app.submit("contact", "a=1").await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    let after = app.db.newest_event_id().await;
    client
        .subscribe_events("s", &format!(r#"afterEventId: "{after}""#))
        .await;
    // The service's own claim (which writes its event), in a transaction rolled back.
    let mut conn = app.db.connect().await;
    let rolled_back =
        diesel_async::AsyncConnection::transaction::<(), _, _>(&mut conn, async |conn| {
            let claimed =
                support::harness::claim_at(conn, chrono::Utc::now(), Duration::from_secs(60), 10)
                    .await
                    .map_err(|_| diesel::result::Error::NotFound)?;
            assert_eq!(
                claimed[0].submission_id.as_ref().map(|id| id.as_str()),
                Some(submission.as_str())
            );
            Err(diesel::result::Error::RollbackTransaction)
        })
        .await;
    assert!(rolled_back.is_err());
    app.submit("contact", "a=2").await;
    let event = client.next_event("s").await;
    assert_eq!(transition(&event), t("PENDING", "null", "CREATED"));
    client.quiet_for(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn revoking_the_key_closes_its_subscriptions_within_seconds() {
    let app = app().await;
    let (revoked_id, revoked_key) = app.create_key("doomed").await;
    let (_, kept_key) = app.create_key("kept").await;
    let url = ws_url(&app);
    let mut doomed = WsClient::ready(&url, &revoked_key).await;
    doomed.subscribe_events("s", "").await;
    let mut kept = WsClient::ready(&url, &kept_key).await;
    kept.subscribe_events("s", r#"afterEventId: "0""#).await;
    // As `hymical-forms keys revoke` does, from any process.
    let mut conn = app.db.connect().await;
    hymical_forms::testing::db::keys::revoke(
        &mut conn,
        &hymical_forms::testing::model::ids::KeyId::parse(&revoked_id).unwrap(),
        app.app.clock.now(),
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let (code, reason) = doomed.closed(Duration::from_secs(10)).await;
    assert_eq!(
        (code, reason.as_str()),
        (4403, "Forbidden: the key was revoked")
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The other key's subscription goes on.
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    app.submit("contact", "a=1").await;
    assert_eq!(kept.next_event("s").await["state"], "PENDING");
}

#[tokio::test(flavor = "multi_thread")]
async fn pruned_history_is_refused_and_kept_history_resumes() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    for n in 0..5 {
        app.submit("contact", &format!("n={n}")).await;
    }
    // The first three events are two days old.
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "UPDATE delivery_events SET occurred_at = now() - interval '2 days' \
         WHERE id IN (SELECT id FROM delivery_events ORDER BY id LIMIT 3)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let ids: Vec<i64> = {
        use diesel::{ExpressionMethods, QueryDsl};
        use hymical_forms::testing::db::schema::delivery_events::dsl::*;
        delivery_events
            .order(id.asc())
            .select(id)
            .load(&mut conn)
            .await
            .unwrap()
    };
    let pruned = hymical_forms::testing::upkeep::history::prune(
        &app.app.db,
        app.app.clock.now() - chrono::Duration::hours(24),
    )
    .await
    .unwrap();
    assert_eq!(pruned.rows, 3, "{pruned:?}");
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    client
        .subscribe_events("old", &format!(r#"afterEventId: "{}""#, ids[0]))
        .await;
    let refused = client.next_json().await;
    assert_eq!(
        refused["payload"]["errors"][0]["extensions"]["code"], "EVENT_HISTORY_EXPIRED",
        "{refused}"
    );
    assert_eq!(client.next_json().await["type"], "complete");
    client
        .subscribe_events("kept", &format!(r#"afterEventId: "{}""#, ids[2]))
        .await;
    let kept = client.events("kept", 2).await;
    assert_eq!(
        kept.iter().map(event_id).collect::<Vec<_>>(),
        ids[3..].to_vec()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn subscriptions_end_with_1001_when_the_server_stops() {
    // The in-process app's services stop when the test app is dropped; a serving process
    // closes its sockets on SIGTERM (see the cross-process test for a real one).
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    client.subscribe_events("s", "").await;
    let addr = app.addr;
    app.stop_live_services();
    match client.next_within(Duration::from_secs(10)).await {
        Some(Frame::Closed { code, .. }) => assert!(code == 1001 || code == 0, "{code} at {addr}"),
        other => panic!("expected the socket to close, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_that_falls_behind_catches_up_without_holding_up_the_others() {
    use futures_util::StreamExt;
    use hymical_forms::testing::app::App;
    use hymical_forms::testing::db::events::EventFilter;
    use hymical_forms::testing::feed::EventFeed;

    // A feed that lets a subscriber fall only two batches behind.
    let db = support::harness::TestDb::new().await;
    let (settings, pool) = support::harness::pool(&db, None).await;
    let app = App::with_event_feed(
        support::harness::config(DEV),
        settings,
        pool.clone(),
        Arc::new(hymical_forms::testing::clock::SystemClock),
        EventFeed::with_capacity(2),
    );
    // The listener and the event reader, as a serving process runs them.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let _services = hymical_forms::testing::services::Services::start(
        &app,
        support::harness::api_plan(listener, &app),
    );
    let mut conn = db.connect().await;
    diesel::sql_query(
        "INSERT INTO endpoints (id, name, is_active, created_at) VALUES ('contact', 'c', true, now())",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let mut created = 0;
    let mut create = async || {
        created += 1;
        // A delivery and its `created` event, as the outbox statement writes them.
        diesel::sql_query(format!(
            "WITH d AS (INSERT INTO webhook_deliveries (id, endpoint_id, destination_url, \
             signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at) \
             VALUES ('whd_{:032x}', 'contact', 'https://example.com/h', 's', 'pending', 0, 0, \
             now(), now()) RETURNING id) \
             INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, attempts, \
             cycle_attempts, occurred_at) \
             SELECT id, 'contact', 'created', 'pending', 0, 0, now() FROM d \
             RETURNING pg_notify('hymical_delivery_event', '')",
            created
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    };

    let mut slow =
        Box::pin(
            app.events
                .subscribe(pool.clone(), EventFilter::default(), Some(0), |_| {}),
        );
    let mut fast =
        Box::pin(
            app.events
                .subscribe(pool.clone(), EventFilter::default(), Some(0), |_| {}),
        );
    create().await;
    let first = slow.next().await.unwrap().unwrap();
    assert_eq!(fast.next().await.unwrap().unwrap().id, first.id);
    // Thirty more changes, each its own batch (the fast one sees each before the next is
    // made), while the slow one is not read at all.
    let mut fast_ids = vec![first.id];
    for _ in 0..30 {
        create().await;
        let event = tokio::time::timeout(Duration::from_secs(10), fast.next())
            .await
            .expect("the fast subscriber is not held up")
            .unwrap()
            .unwrap();
        fast_ids.push(event.id);
    }
    // The slow one lagged far past its two batches; it reads the gap from the table and
    // gets every event once, in order.
    let mut slow_ids = vec![first.id];
    while slow_ids.len() < fast_ids.len() {
        let event = tokio::time::timeout(Duration::from_secs(10), slow.next())
            .await
            .expect("the slow subscriber catches up")
            .unwrap()
            .unwrap();
        slow_ids.push(event.id);
    }
    assert_eq!(slow_ids, fast_ids);
    // And it is live again afterwards.
    create().await;
    let live = slow.next().await.unwrap().unwrap();
    assert!(live.id > *fast_ids.last().unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn identical_live_subscriptions_share_one_execution_and_a_laggard_resumes_alone() {
    use futures_util::StreamExt;
    use hymical_forms::testing::graphql::fanout::{member_stream, Groups, Operation, Rendered};
    use hymical_forms::testing::graphql::loaders::Loaders;
    use hymical_forms::testing::graphql::OperationDb;

    let app = app().await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    let schema = hymical_forms::testing::graphql::build_schema(app.app.clone());
    // Members may fall two results behind their group.
    let groups = Arc::new(Groups::with_backlog(2));
    let operation = Operation {
        query: "subscription { deliveryStateChanged { id state } }".into(),
        operation_name: None,
        variables: Value::Null,
    };
    let key = operation
        .group_key(None)
        .expect("a live subscription shares");
    let make = {
        let (app, operation) = (app.app.clone(), operation.clone());
        move || {
            operation
                .request()
                .data(OperationDb(app.graphql_db.clone()))
                .data(Loaders::uncached(&app.graphql_db))
                .data(hymical_forms::testing::auth::AuthenticatedKey {
                    id: hymical_forms::testing::model::ids::KeyId::generate(),
                    name: "fan-out".into(),
                    role: hymical_forms::testing::model::state::KeyRole::Read,
                    project: None,
                    view: None,
                })
        }
    };
    let join = || {
        member_stream(
            groups.join(key.clone(), &schema, make.clone()),
            make.clone(),
            schema.clone(),
        )
    };
    let id_of = |item: Option<Rendered>| match item {
        Some(Rendered::Result { payload, event_id }) => {
            let payload: Value = serde_json::from_str(&payload).unwrap();
            let id = event_id.expect("results show their event");
            assert_eq!(
                payload["data"]["deliveryStateChanged"]["id"],
                id.to_string(),
                "{payload}"
            );
            id
        }
        other => panic!("expected a result, got {other:?}"),
    };
    let mut fast = Box::pin(join());
    let mut slow = Box::pin(join());
    assert_eq!(groups.running(), 1, "one execution for both");

    // The group goes live at some point after it starts: make changes until one shows.
    let first = loop {
        app.submit("contact", "a=1").await;
        if let Ok(item) = tokio::time::timeout(Duration::from_millis(500), fast.next()).await {
            break id_of(item);
        }
    };
    let mut fast_ids = vec![first];
    for n in 0..20 {
        app.submit("contact", &format!("n={n}")).await;
        let item = tokio::time::timeout(Duration::from_secs(10), fast.next())
            .await
            .expect("the fast member is not held up");
        fast_ids.push(id_of(item));
    }
    // The slow member was not read at all: it fell behind, left the group, and resumes on
    // its own after the last event it was shown, so it gets every event once, in order.
    let mut slow_ids = Vec::new();
    while slow_ids.last() != fast_ids.last() {
        let item = tokio::time::timeout(Duration::from_secs(10), slow.next())
            .await
            .expect("the slow member catches up");
        slow_ids.push(id_of(item));
    }
    let from = slow_ids
        .iter()
        .position(|id| *id == first)
        .expect("saw the first");
    assert_eq!(slow_ids[from..], fast_ids[..]);
    assert!(slow_ids.windows(2).all(|w| w[0] < w[1]), "{slow_ids:?}");
    // Both go on live.
    app.submit("contact", "a=2").await;
    let next_fast = id_of(fast.next().await);
    assert_eq!(id_of(slow.next().await), next_fast);
    // Members gone: the execution stops.
    drop((fast, slow));
    for _ in 0..50 {
        if groups.running() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(groups.running(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn sockets_with_the_same_live_subscription_all_get_each_event() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    let url = ws_url(&app);
    let mut first = WsClient::ready(&url, &key).await;
    first.subscribe_events("a", "").await;
    loop {
        app.submit("contact", "warm=1").await;
        if let Some(Frame::Json(message)) = first.next_within(Duration::from_millis(500)).await {
            assert_eq!(message["type"], "next");
            break;
        }
    }
    let mut others = Vec::new();
    for n in 0..3 {
        let mut client = WsClient::ready(&url, &key).await;
        client.subscribe_events(&format!("op{n}"), "").await;
        // Messages are handled in order: after the pong the subscription is in place.
        client.send(json!({ "type": "ping" })).await;
        assert_eq!(client.next_json().await["type"], "pong");
        others.push((format!("op{n}"), client));
    }
    // Drain anything the first saw meanwhile, then one change for everyone.
    while first
        .next_within(Duration::from_millis(200))
        .await
        .is_some()
    {}
    for (_, client) in &mut others {
        while client
            .next_within(Duration::from_millis(50))
            .await
            .is_some()
        {}
    }
    app.submit("contact", "a=1").await;
    let seen = first.next_event("a").await;
    for (id, client) in &mut others {
        assert_eq!(client.next_event(id).await, seen);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_change_the_service_makes_writes_its_event() {
    use hymical_forms::testing::db::deliveries::{self, ReplayFilter, ReplayTarget};
    use hymical_forms::testing::db::models::ClaimedDelivery;
    use hymical_forms::testing::db::queue::{self, AttemptRecord, OwnerTransition};
    use hymical_forms::testing::model::ids::ClaimToken;
    use hymical_forms::testing::model::state::AttemptOutcome;

    let app = app().await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    app.submit("contact", "a=1").await;
    let mut conn = app.db.connect().await;
    let now = chrono::Utc::now();
    let lease = Duration::from_secs(60);
    let claim = async |conn: &mut diesel_async::AsyncPgConnection, at| {
        let mut claimed = support::harness::claim_at(conn, at, lease, 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        claimed.remove(0)
    };
    let record = async |conn: &mut diesel_async::AsyncPgConnection,
                        claimed: &ClaimedDelivery,
                        token: &ClaimToken,
                        at| {
        let attempt_id = hymical_forms::testing::model::ids::AttemptId::generate();
        queue::record_attempt(
            conn,
            &AttemptRecord {
                attempt_id: &attempt_id,
                delivery_id: &claimed.id,
                claim_token: token,
                destination_url: &claimed.destination_url,
                attempted_at: at,
                duration_ms: 5,
                outcome: AttemptOutcome::HttpError,
                response_status: Some(500),
                error: None,
                reply: None,
            },
            OwnerTransition::Failed,
            Some(at),
        )
        .await
        .unwrap();
    };

    // Claimed, handed back at shutdown, claimed again, its lease runs out, claimed by
    // another worker; the first worker records late; the second records a final failure.
    let first = claim(&mut conn, now).await;
    assert_eq!(
        queue::hand_back(&mut conn, &[(&first.id, &first.claim_token)])
            .await
            .unwrap(),
        1
    );
    let second = claim(&mut conn, now).await;
    let later = now + chrono::Duration::seconds(120);
    let third = claim(&mut conn, later).await;
    record(&mut conn, &second, &second.claim_token, later).await;
    record(&mut conn, &third, &third.claim_token, later).await;
    // Replayed, claimed, and failed without an attempt (as when its submission was erased
    // meanwhile); then replayed in bulk.
    assert!(matches!(
        deliveries::replay(&mut conn, &first.id, ReplayTarget::Snapshot, Some(later))
            .await
            .unwrap(),
        deliveries::ReplayOutcome::Replayed(_)
    ));
    let fourth = claim(&mut conn, later).await;
    assert!(
        queue::fail_without_attempt(&mut conn, &fourth.id, &fourth.claim_token, Some(later))
            .await
            .unwrap()
    );
    // Bulk replay.
    let replayed = deliveries::replay_matching(
        &mut conn,
        &ReplayFilter::default(),
        ReplayTarget::Snapshot,
        Some(later),
    )
    .await
    .unwrap();
    assert_eq!(replayed, 1);
    // kind state (previous) attempts/cycle outcome, one line per event.
    type Stored = (String, String, Option<String>, i32, i32, Option<String>);
    let events: Vec<String> = {
        use diesel::{ExpressionMethods, QueryDsl};
        use hymical_forms::testing::db::schema::delivery_events::dsl::*;
        let rows: Vec<Stored> = delivery_events
            .filter(delivery_id.eq(&first.id))
            .order(id.asc())
            .select((
                kind,
                state,
                previous_state,
                attempts,
                cycle_attempts,
                outcome,
            ))
            .load(&mut conn)
            .await
            .unwrap();
        rows.into_iter()
            .map(|(k, s, p, a, c, o)| {
                format!(
                    "{k} {s} ({}) {a}/{c} {}",
                    p.unwrap_or_default(),
                    o.unwrap_or_default()
                )
            })
            .collect()
    };
    assert_eq!(
        events,
        vec![
            "created pending () 0/0 ",
            "claimed processing (pending) 0/0 ",
            "handed_back pending (processing) 0/0 ",
            "claimed processing (pending) 0/0 ",
            "claimed processing (processing) 0/0 ",
            "late_attempt_recorded processing (processing) 1/0 http_error",
            "attempt_recorded failed (processing) 2/1 http_error",
            "replayed pending (failed) 2/0 ",
            "claimed processing (pending) 2/0 ",
            "failed_without_attempt failed (processing) 2/0 ",
            "replayed pending (failed) 2/0 ",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pruning_never_removes_events_still_within_retention() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    let first_before = app.db.newest_event_id().await;
    for n in 0..3 {
        app.submit("contact", &format!("n={n}")).await;
    }
    // Nothing is older than a day: pruning (at start and hourly) removes nothing.
    for _ in 0..3 {
        let pruned = hymical_forms::testing::upkeep::history::prune(
            &app.app.db,
            app.app.clock.now() - chrono::Duration::hours(24),
        )
        .await
        .unwrap();
        assert_eq!(pruned.rows, 0, "{pruned:?}");
    }
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    client
        .subscribe_events("s", &format!(r#"afterEventId: "{first_before}""#))
        .await;
    let events = client.events("s", 3).await;
    assert!(events.iter().all(|e| e["kind"] == "CREATED"), "{events:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_transaction_in_another_database_does_not_delay_the_feed() {
    let app = app().await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    let mut client = WsClient::ready(&ws_url(&app), &key).await;
    client.subscribe_events("s", "").await;
    // A writing transaction elsewhere in the cluster, left open for the whole test; and
    // one in this database by another application.
    let elsewhere = support::harness::TestDb::new().await;
    let mut other = elsewhere.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut other)
        .await
        .unwrap();
    diesel::sql_query(
        "INSERT INTO endpoints (id, name, is_active, created_at) VALUES ('x-y', 'x', true, now())",
    )
    .execute(&mut other)
    .await
    .unwrap();
    let mut neighbour = app.db.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut neighbour)
        .await
        .unwrap();
    diesel::sql_query(
        "INSERT INTO endpoints (id, name, is_active, created_at) VALUES ('n-b', 'n', true, now())",
    )
    .execute(&mut neighbour)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    app.submit("contact", "a=1").await;
    let event = client.next_event("s").await;
    assert_eq!(event["kind"], "CREATED");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the feed waited {:?} for unrelated transactions",
        started.elapsed()
    );
    diesel::sql_query("ROLLBACK")
        .execute(&mut other)
        .await
        .unwrap();
    diesel::sql_query("ROLLBACK")
        .execute(&mut neighbour)
        .await
        .unwrap();
}

/// A client that subscribes and then stops reading cannot hold its connection: once the
/// server's writes stop moving for the send timeout it drops the socket, so revocation and
/// shutdown are not hidden behind a blocked write and the connection's slot is freed.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_that_stops_reading_is_dropped_after_the_send_timeout() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let mut vars = DEV.to_vec();
    vars.push(("FORMS_HTTP_SEND_TIMEOUT_SECONDS", "1"));
    let app =
        TestApp::start_with(&vars, Arc::new(hymical_forms::testing::clock::SystemClock)).await;
    let (_, key) = app.create_key("stalled").await;
    // A tiny receive window, so the server's writes block soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(app.addr).await.unwrap();
    let client_port = stream.local_addr().unwrap().port();
    let mut request = ws_url(&app).into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .unwrap();
    let send = |value: Value| Message::Text(value.to_string().into());
    ws.send(send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {key}") } })))
        .await
        .unwrap();
    let ack = ws.next().await.unwrap().unwrap();
    assert!(ack.to_text().unwrap().contains("connection_ack"), "{ack:?}");
    // Frames of about 4 KB (aliases repeat a field), so a few thousand fill every buffer.
    let fields: Vec<String> = (0..100).map(|n| format!("t{n}: occurredAt")).collect();
    let query = format!(
        "subscription {{ deliveryStateChanged {{ id {} }} }}",
        fields.join(" ")
    );
    ws.send(send(
        json!({ "type": "subscribe", "id": "s", "payload": { "query": query } }),
    ))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Far more events than the socket buffers hold, and the client reads none of them.
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "WITH e AS (INSERT INTO endpoints (id, name, is_active, created_at) VALUES ('stall', 's', true, now()) RETURNING id),
              d AS (INSERT INTO webhook_deliveries (id, endpoint_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at)
                    SELECT 'whd_' || repeat('5', 32), id, 'https://example.com/h', 's', 'pending', 0, 0, now(), now() FROM e RETURNING id, endpoint_id)
         INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, attempts, cycle_attempts, occurred_at)
         SELECT d.id, d.endpoint_id, 'created', 'pending', 0, 0, now() FROM d, generate_series(1, 10000)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    diesel::sql_query("SELECT pg_notify('hymical_delivery_event', '')")
        .execute(&mut conn)
        .await
        .unwrap();
    // Wait until the server's writes are stuck: its socket's send queue is full and has
    // not moved for well over the send timeout (1 s). Watching the queue rather than a
    // clock keeps this independent of how fast a loaded machine produces frames.
    let server_port = app.addr.port();
    let mut last = 0;
    let mut stable_since = tokio::time::Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server's send queue never filled (last {last} bytes)"
        );
        let queued = server_send_queue(server_port, client_port);
        if queued != last {
            last = queued;
            stable_since = tokio::time::Instant::now();
        } else if queued > 0 && stable_since.elapsed() > Duration::from_secs(4) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Reading now finds what the kernel buffered, then the end: the server is gone. With a
    // write that waited for ever, the connection would stay open and stream all 10,000.
    let mut frames = 0;
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(_))) => frames += 1,
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the server kept the stalled connection ({frames} frames)"
    );
    assert!(frames < 10_000, "{frames} frames: the server never gave up");
}

/// Bytes queued for sending on the server's side of the loopback connection between
/// `server_port` and `client_port`, from `/proc/net/tcp`.
fn server_send_queue(server_port: u16, client_port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port =
        |address: &str| u16::from_str_radix(address.rsplit(':').next().unwrap(), 16).unwrap();
    table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| port(fields[1]) == server_port && port(fields[2]) == client_port)
        .map(|fields| u64::from_str_radix(fields[4].split(':').next().unwrap(), 16).unwrap())
        .unwrap_or(0)
}

/// A failover with asynchronous replication: the promoted server lacks the last events the
/// old primary committed (and subscribers saw), and its sequence would hand their ids out
/// again. Simulated on one server: the last events deleted, the sequence set back, and the
/// timeline forgotten (as a server on a timeline the service has not written on). The
/// first connection of a writer on it moves the ids on; the subscriber gets the events
/// written afterwards, none skipped, and the move happens once.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_failover_that_lost_events_new_events_get_new_ids_and_reach_subscribers() {
    use hymical_forms::testing::app::App;
    use hymical_forms::testing::db::events::{EventFilter, TIMELINE_ID_MARGIN};
    use hymical_forms::testing::feed::EventFeed;

    let db = support::harness::TestDb::new().await;
    let (settings, pool) = support::harness::pool(&db, None).await;
    let app = App::with_event_feed(
        support::harness::config(DEV),
        settings,
        pool.clone(),
        Arc::new(hymical_forms::testing::clock::SystemClock),
        EventFeed::new(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let _services = hymical_forms::testing::services::Services::start(
        &app,
        support::harness::api_plan(listener, &app),
    );
    let mut conn = db.connect().await;
    diesel::sql_query(
        "INSERT INTO endpoints (id, name, is_active, created_at) VALUES ('contact', 'c', true, now())",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // A delivery and its `created` event, written by another process's pool.
    let create = async |writer: &hymical_forms::testing::db::Db, n: u32| {
        writer
            .run(async |conn| {
                diesel::sql_query(format!(
                    "WITH d AS (INSERT INTO webhook_deliveries (id, endpoint_id, destination_url, \
                     signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at) \
                     VALUES ('whd_{n:032x}', 'contact', 'https://example.com/h', 's', 'pending', \
                     0, 0, now(), now()) RETURNING id) \
                     INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, attempts, \
                     cycle_attempts, occurred_at) \
                     SELECT id, 'contact', 'created', 'pending', 0, 0, now() FROM d \
                     RETURNING pg_notify('hymical_delivery_event', '')"
                ))
                .execute(conn)
                .await?;
                Ok(())
            })
            .await
            .unwrap();
    };
    let mut subscriber =
        Box::pin(
            app.events
                .subscribe(pool.clone(), EventFilter::default(), Some(0), |_| {}),
        );
    let (_, before) = support::harness::pool(&db, None).await;
    let mut seen = Vec::new();
    for n in 1..=3 {
        create(&before, n).await;
        seen.push(next_event(&mut subscriber).await.id);
    }
    let last = *seen.last().unwrap();

    // The failover: the last two events never reached the promoted server.
    for statement in [
        format!("DELETE FROM delivery_events WHERE id > {}", seen[0]),
        format!(
            "SELECT setval(pg_get_serial_sequence('delivery_events', 'id'), {})",
            seen[0]
        ),
        "DELETE FROM event_timelines".to_string(),
    ] {
        diesel::sql_query(statement)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    // A writer connecting afresh, as every process does after a failover.
    let (_, after) = support::harness::pool(&db, None).await;
    create(&after, 4).await;
    let moved = next_event(&mut subscriber).await;
    assert!(
        moved.id > last,
        "an id handed out again: {} after {last}",
        moved.id
    );
    assert!(moved.id > seen[0] + TIMELINE_ID_MARGIN);
    // Once per timeline: another process connecting now does not move the ids again.
    let (_, later) = support::harness::pool(&db, None).await;
    create(&later, 5).await;
    assert_eq!(next_event(&mut subscriber).await.id, moved.id + 1);
    let timelines: i64 = {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        diesel::sql_query("SELECT count(*) AS n FROM event_timelines")
            .get_result::<Count>(&mut conn)
            .await
            .unwrap()
            .n
    };
    assert_eq!(timelines, 1);
}

async fn next_event<E: std::fmt::Debug>(
    subscriber: &mut (impl futures_util::Stream<Item = Result<hymical_forms::testing::db::models::EventRow, E>>
              + Unpin),
) -> hymical_forms::testing::db::models::EventRow {
    tokio::time::timeout(
        Duration::from_secs(10),
        futures_util::StreamExt::next(subscriber),
    )
    .await
    .expect("an event, not skipped")
    .expect("the stream goes on")
    .expect("an event")
}
