//! Ordered delivery (docs/delivery.md, "Ordered delivery"): a destination that asks for it
//! gets one request at a time, in acceptance order; a delivery waiting for its retry holds
//! the ones behind it; an unordered destination beside it is not held. Under faults (two
//! worker processes, SIGKILLs, a receiver failing every fifth request) each receiver still
//! sees its destination's submissions in acceptance order: `ordered_under_faults`.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use chrono::{TimeZone, Utc};
use hymical_forms::testing::clock::ManualClock;
use serde_json::{json, Value};

use support::harness::{data, serve_on_loopback, TestApp};

const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
];

/// A receiver recording, per path, the `n` field of each request's submission in arrival
/// order; it answers 503 to its first `fail_first` requests and to every `fail_every`-th
/// request overall (0: never).
#[derive(Clone, Default)]
struct Recording {
    seen: Arc<Mutex<Vec<(String, u64, u16)>>>,
    fail_every: u64,
    fail_first: u64,
}

impl Recording {
    async fn start(fail_every: u64, fail_first: u64) -> (Recording, String) {
        let recording = Recording {
            fail_every,
            fail_first,
            ..Recording::default()
        };
        let router = Router::new()
            .route("/{path}", post(record))
            .with_state(recording.clone());
        let addr = serve_on_loopback(router).await;
        (recording, format!("http://{addr}"))
    }

    /// The `n` of each request to `path`, in arrival order, with the status answered.
    fn seen(&self, path: &str) -> Vec<(u64, u16)> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, n, status)| (*n, *status))
            .collect()
    }
}

async fn record(
    State(recording): State<Recording>,
    Path(path): Path<String>,
    body: axum::body::Bytes,
) -> StatusCode {
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let n = body["submission"]["fields"]["n"][0]
        .as_str()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    let mut seen = recording.seen.lock().unwrap();
    let count = seen.len() as u64 + 1;
    let status = if count <= recording.fail_first
        || (recording.fail_every > 0 && count % recording.fail_every == 0)
    {
        503
    } else {
        204
    };
    seen.push((path, n, status));
    StatusCode::from_u16(status).unwrap()
}

async fn add(app_gql: impl std::future::Future<Output = Value>) -> String {
    let answer = data(app_gql.await);
    answer["addWebhookDestination"]["destination"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

const ADD: &str = "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id ordered } } }";

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_holds_the_deliveries_behind_it_and_only_those() {
    let (ordered_receiver, ordered_base) = Recording::start(0, 1).await;
    let (unordered_receiver, unordered_base) = Recording::start(0, 0).await;
    let start = Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = TestApp::start_with(DEV, clock.clone()).await;
    let (_, key) = app.create_key("ordering").await;
    app.create_contact_endpoint(&key).await;
    let ordered = add(app.gql(
        &key,
        ADD,
        json!({ "input": { "endpointId": "contact", "url": format!("{ordered_base}/ordered"), "ordered": true } }),
    ))
    .await;
    add(app.gql(
        &key,
        ADD,
        json!({ "input": { "endpointId": "contact", "url": format!("{unordered_base}/unordered") } }),
    ))
    .await;
    for n in 1..=3 {
        app.submit("contact", &format!("n={n}")).await;
        clock.advance(chrono::Duration::milliseconds(1));
    }
    let worker = app.worker(None);
    // The unordered destination's three and the ordered one's head alone; the head is
    // answered 503 and waits 10 s.
    assert_eq!(worker.run_once().await.unwrap(), 4);
    assert_eq!(unordered_receiver.seen("unordered").len(), 3);
    assert_eq!(ordered_receiver.seen("ordered"), [(1, 503)]);
    // The two behind it are due, and held.
    clock.advance(chrono::Duration::seconds(5));
    assert_eq!(worker.run_once().await.unwrap(), 0, "held behind the head");
    clock.advance(chrono::Duration::seconds(5));
    for _ in 0..10 {
        worker.run_once().await.unwrap();
        if ordered_receiver.seen("ordered").len() >= 4 {
            break;
        }
    }
    assert_eq!(
        ordered_receiver.seen("ordered"),
        [(1, 503), (1, 204), (2, 204), (3, 204)],
        "one at a time, in acceptance order"
    );
    let states = app
        .db
        .count(&format!(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE destination_id = '{ordered}' AND state = 'delivered'"
        ))
        .await;
    assert_eq!(states, 3);
}
