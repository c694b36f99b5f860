//! A stored state, outcome or event kind this build does not know is a read error, never
//! taken for a value it knows. The database's own checks keep such values out, so each
//! test drops a check first, as a row written by another program (or a newer build whose
//! migration widened the vocabulary) would find it.

use std::sync::Arc;

use diesel_async::SimpleAsyncConnection;
use hymical_forms::testing::clock::SystemClock;
use hymical_forms::testing::db;
use hymical_forms::testing::model::ids::DeliveryId;
use serde_json::{json, Value};

use support::harness::TestApp;
use support::ws_client::WsClient;

const DELIVERY: &str = "whd_0000000000000000000000000000000a";

/// An app with one delivery (and its submission and endpoint) written directly.
async fn app_with_a_delivery() -> TestApp {
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    let mut conn = app.db.connect().await;
    conn.batch_execute(&format!(
        "INSERT INTO endpoints (id, name, webhook_url, webhook_secret)
             VALUES ('vocab', 'Vocabulary', 'https://a.example/h', 'whsec_' || repeat('ab', 32));
         INSERT INTO submissions (id, endpoint_id, received_at, fields)
             VALUES ('sub_0000000000000000000000000000000a', 'vocab', now(), '{{\"a\":[\"1\"]}}');
         INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url,
             signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at)
             VALUES ('{DELIVERY}', 'sub_0000000000000000000000000000000a', 'vocab',
             'https://a.example/h', 'whsec_' || repeat('ab', 32), 'pending', 0, 0, now(), now());"
    ))
    .await
    .unwrap();
    app
}

fn code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or("<none>")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_delivery_state_is_an_error_not_a_default() {
    let app = app_with_a_delivery().await;
    let (_, key) = app.create_key("vocab").await;
    let query = "query($id: ID!) { delivery(id: $id) { id state } }";
    let known = app.gql(&key, query, json!({ "id": DELIVERY })).await;
    assert_eq!(known["data"]["delivery"]["state"], "PENDING", "{known}");

    let mut conn = app.db.connect().await;
    conn.batch_execute(&format!(
        "ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_state_valid;
         UPDATE webhook_deliveries SET state = 'archived' WHERE id = '{DELIVERY}';"
    ))
    .await
    .unwrap();

    // The read itself fails, naming what it could not read.
    let read = db::deliveries::find_many(&mut conn, &[DeliveryId::parse(DELIVERY).unwrap()]).await;
    let error = read.expect_err("a state no variant spells must not be read");
    assert!(error.is_unreadable_row());
    let text = error.summary();
    assert_eq!(
        text, "state: delivery state \"archived\" in the database is not one this build knows",
        "{text}"
    );

    // Through the API: an internal error, no delivery with a made-up state.
    let body = app.gql(&key, query, json!({ "id": DELIVERY })).await;
    assert_eq!(body["data"]["delivery"], Value::Null, "{body}");
    assert_eq!(code(&body), "INTERNAL_ERROR", "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_attempt_outcome_is_an_error_not_a_default() {
    let app = app_with_a_delivery().await;
    let (_, key) = app.create_key("vocab").await;
    let mut conn = app.db.connect().await;
    conn.batch_execute(&format!(
        "ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_outcome_valid;
         INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number,
             destination_url, attempted_at, outcome, response_status, duration_ms)
             VALUES ('att_0000000000000000000000000000000a', '{DELIVERY}',
             'sub_0000000000000000000000000000000a', 1, 'https://a.example/h', now(),
             'teapot', 418, 5);"
    ))
    .await
    .unwrap();
    let read =
        db::deliveries::attempts_for(&mut conn, &[DeliveryId::parse(DELIVERY).unwrap()]).await;
    let text = read.expect_err("an outcome no variant spells").summary();
    assert_eq!(
        text, "outcome: attempt outcome \"teapot\" in the database is not one this build knows",
        "{text}"
    );
    let body = app
        .gql(
            &key,
            "query($id: ID!) { delivery(id: $id) { id attemptHistory { number outcome } } }",
            json!({ "id": DELIVERY }),
        )
        .await;
    assert_eq!(code(&body), "INTERNAL_ERROR", "{body}");
    assert!(
        body["data"]["delivery"]["attemptHistory"].is_null(),
        "no history with a made-up outcome: {body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_event_kind_is_an_error_not_a_default() {
    let app = app_with_a_delivery().await;
    let (_, key) = app.create_key("vocab").await;
    let mut conn = app.db.connect().await;
    conn.batch_execute(&format!(
        "ALTER TABLE delivery_events DROP CONSTRAINT delivery_events_kind;
         INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, attempts,
             cycle_attempts, occurred_at)
             VALUES ('{DELIVERY}', 'vocab', 'teleported', 'pending', 0, 0, now());"
    ))
    .await
    .unwrap();
    let read = db::events::page(
        &mut conn,
        0,
        i64::MAX,
        &db::events::EventFilter::default(),
        10,
    )
    .await;
    let text = read.expect_err("a kind no variant spells").summary();
    assert_eq!(
        text, "kind: event kind \"teleported\" in the database is not one this build knows",
        "{text}"
    );
    // A subscriber replaying that history gets an error, not an event of another kind.
    let url = format!("ws://{}/graphql/ws", app.addr);
    let mut client = WsClient::ready(&url, &key).await;
    client.subscribe_events("s", r#"afterEventId: "0""#).await;
    // (An execution error travels in a `next` message, as graphql-transport-ws has it.)
    let frame = client.next_non_ka().await;
    assert_eq!(frame["type"], "next", "{frame}");
    assert!(frame["payload"]["data"].is_null(), "no event: {frame}");
    assert_eq!(
        frame["payload"]["errors"][0]["extensions"]["code"], "INTERNAL_ERROR",
        "{frame}"
    );
}
