//! Expensive GraphQL documents are refused before anything expands them, over HTTP and
//! over WebSocket, in milliseconds; public intake does not notice them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hymical_forms::testing::clock::SystemClock;
use serde_json::json;

use crate::harness::TestApp;
use crate::ws_client::WsClient;

/// Fragments each spreading the previous one twice: 2^depth fields once expanded, in
/// well under a kilobyte.
fn fragment_bomb(depth: usize) -> String {
    let mut query = format!("query {{ ...f{depth} }}\nfragment f1 on Query {{ version }}\n");
    for level in 1..depth {
        query.push_str(&format!(
            "fragment f{} on Query {{ ...f{level} ...f{level} }}\n",
            level + 1
        ));
    }
    query
}

fn documents() -> Vec<(&'static str, serde_json::Value)> {
    let aliases: String = (0..12_000).map(|i| format!("a{i}: version ")).collect();
    vec![
        ("fragment bomb", json!({ "query": fragment_bomb(40) })),
        (
            "alias flood",
            json!({ "query": format!("{{ {aliases} }}") }),
        ),
        (
            "deep nesting",
            json!({ "query": format!("{}{}", "{ a ".repeat(5_000), "}".repeat(5_000)) }),
        ),
        (
            "giant variables",
            json!({
                "query": "query($ids: [ID!]) { version }",
                "variables": { "ids": (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>() },
            }),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn expensive_documents_are_refused_in_milliseconds() {
    let app = TestApp::start_with(
        &[("FORMS_RATE_LIMIT_ENABLED", "false")],
        Arc::new(SystemClock),
    )
    .await;
    let (_, key) = app.create_key("ops").await;
    assert!(fragment_bomb(40).len() < 2048);
    for (name, body) in documents() {
        let started = Instant::now();
        let response = app
            .http
            .post(app.url("/graphql"))
            .header("authorization", format!("Bearer {key}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let took = started.elapsed();
        let status = response.status().as_u16();
        let answer: serde_json::Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{name}: {answer}");
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
            "{name}: {answer}"
        );
        assert!(answer.get("data").is_none(), "{name}");
        assert!(took < Duration::from_millis(500), "{name} took {took:?}");
    }
    // With the modern media type a refused document is a 400.
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("authorization", format!("Bearer {key}"))
        .header("accept", "application/graphql-response+json")
        .json(&json!({ "query": fragment_bomb(40) }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    // Over WebSocket: an `error` for the operation, the connection stays open.
    let mut client = WsClient::ready(&format!("ws://{}/graphql/ws", app.addr), &key).await;
    let started = Instant::now();
    client
        .send(
            json!({ "type": "subscribe", "id": "bomb", "payload": { "query": fragment_bomb(40) } }),
        )
        .await;
    let refused = client.next_json().await;
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["payload"][0]["extensions"]["code"],
        "QUERY_TOO_COMPLEX"
    );
    client.send(json!({ "type": "ping" })).await;
    assert_eq!(client.next_json().await["type"], "pong");
}

#[tokio::test(flavor = "multi_thread")]
async fn public_intake_keeps_its_latency_while_bombs_arrive() {
    let app = TestApp::start_with(
        &[("FORMS_RATE_LIMIT_ENABLED", "false")],
        Arc::new(SystemClock),
    )
    .await;
    app.insert_endpoint(&crate::harness::endpoint("contact"))
        .await;
    let (_, key) = app.create_key("ops").await;
    let bombs = {
        let (http, url, key) = (app.http.clone(), app.url("/graphql"), key.clone());
        tokio::spawn(async move {
            for _ in 0..20 {
                for (_, body) in documents() {
                    let _ = http
                        .post(&url)
                        .header("authorization", format!("Bearer {key}"))
                        .json(&body)
                        .send()
                        .await;
                }
            }
        })
    };
    let mut slowest = Duration::ZERO;
    for n in 0..30 {
        let started = Instant::now();
        let response = app
            .post_form(
                "contact",
                Some("application/x-www-form-urlencoded"),
                format!("n={n}"),
                &[],
            )
            .await;
        assert_eq!(response.status(), 202);
        slowest = slowest.max(started.elapsed());
    }
    bombs.await.unwrap();
    assert!(slowest < Duration::from_secs(1), "intake took {slowest:?}");
}
