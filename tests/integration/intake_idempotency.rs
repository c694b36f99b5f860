//! Idempotency-Key handling, including racing first requests.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Barrier;

use support::harness::{endpoint, webhook, webhook_secret, TestApp};

const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
const KEY: &str = "order-2026-0001-abcdef";

async fn app() -> TestApp {
    let app = TestApp::start_without_rate_limit().await;
    let contact = endpoint("contact");
    app.insert_endpoint_with(
        &contact,
        webhook(&contact, "https://receiver.example/hook", webhook_secret()),
    )
    .await;
    app
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_returns_the_original_and_stores_nothing_new() {
    let app = app().await;
    let first = app
        .post_form("contact", FORM, "a=1&b=2&a=3", &[("idempotency-key", KEY)])
        .await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["idempotent_replay"], false);

    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let again = app
        .post_form("contact", FORM, "a=1&b=2&a=3", &[("idempotency-key", KEY)])
        .await;
    assert_eq!(again.status(), 202);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["submission_id"], first["submission_id"]);
    assert_eq!(again["received_at"], first["received_at"]);
    assert_eq!(again["field_count"], 3);
    assert_eq!(again["idempotent_replay"], true);
    assert_eq!(again["delivery"]["queued"], true);
    assert_eq!(app.stored_counts().await, (1, 1));

    // The same fields in another encoding normalise to the same fingerprint.
    let json = app
        .post_form(
            "contact",
            Some("application/json"),
            r#"{"a": ["1", "3"], "b": "2"}"#,
            &[("idempotency-key", KEY)],
        )
        .await;
    assert_eq!(json.status(), 202);
    let json: Value = json.json().await.unwrap();
    assert_eq!(json["submission_id"], first["submission_id"]);

    let other = app
        .post_form("contact", FORM, "a=1&b=2", &[("idempotency-key", KEY)])
        .await;
    assert_eq!(other.status(), 409);
    let other: Value = other.json().await.unwrap();
    assert_eq!(other["error"]["code"], "idempotency_conflict");
    assert_eq!(other["error"]["details"]["endpoint_id"], "contact");
    assert_eq!(other["error"]["details"]["idempotency_key"], KEY);
    assert_eq!(app.stored_counts().await, (1, 1));

    // Keys are scoped per endpoint.
    app.insert_endpoint(&endpoint("other")).await;
    let elsewhere = app
        .post_form("other", FORM, "a=1&b=2", &[("idempotency-key", KEY)])
        .await;
    assert_eq!(elsewhere.status(), 202);
    assert_eq!(app.stored_counts().await, (2, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_concurrent_first_requests_store_exactly_one() {
    let app = Arc::new(app().await);
    let barrier = Arc::new(Barrier::new(20));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let app = app.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            // Half send one body, half another: whichever wins, the others of its body
            // are replays and the rest conflicts.
            let body = if i % 2 == 0 { "pick=even" } else { "pick=odd" };
            barrier.wait().await;
            let response = app
                .post_form("contact", FORM, body, &[("idempotency-key", KEY)])
                .await;
            let status = response.status().as_u16();
            let json: Value = response.json().await.unwrap();
            (i % 2, status, json)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(
        app.stored_counts().await,
        (1, 1),
        "exactly one submission and one delivery"
    );
    let winners: Vec<_> = results
        .iter()
        .filter(|(_, _, b)| b["idempotent_replay"] == false)
        .collect();
    assert_eq!(winners.len(), 1, "one first write: {results:?}");
    let winning_parity = winners[0].0;
    let id = winners[0].2["submission_id"].clone();
    for (parity, status, body) in &results {
        assert!(
            *status == 202 || *status == 409,
            "never 5xx: {status} {body}"
        );
        if *parity == winning_parity {
            assert_eq!(*status, 202, "{body}");
            assert_eq!(body["submission_id"], id);
        } else {
            assert_eq!(*status, 409, "{body}");
            assert_eq!(body["error"]["code"], "idempotency_conflict");
        }
    }
}
