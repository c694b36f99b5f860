//! Ordered delivery under faults: two serving processes deliver three ordered destinations
//! while one of them is SIGKILLed again and again and the receiver answers 503 to every
//! fifth request. Each destination's receiver must see its submissions in acceptance
//! order: a submission is sent again (a retry, or a lost lease after a kill) before the
//! next one is sent at all, never after it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use diesel_async::SimpleAsyncConnection;
use serde_json::Value;

use crate::probe;
use support::harness::{post_urlencoded, serve_on_loopback, wait_for_status, ServeProcess, TestDb};

/// Every request's destination path and submission number, in arrival order; every fifth
/// is answered 503.
#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<Vec<(String, u64)>>>,
}

async fn receive(
    State(receiver): State<Receiver>,
    Path(path): Path<String>,
    body: axum::body::Bytes,
) -> StatusCode {
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let n = body["submission"]["fields"]["n"][0]
        .as_str()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    let mut seen = receiver.seen.lock().unwrap();
    seen.push((path, n));
    if seen.len() % 5 == 0 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::NO_CONTENT
    }
}

const DESTINATIONS: [&str; 3] = ["first", "second", "third"];

#[tokio::test(flavor = "multi_thread")]
async fn ordered_destinations_keep_acceptance_order_through_kills_and_failures() {
    let submissions: u64 = if crate::long() { 300 } else { 40 };
    let kills = if crate::long() { 10 } else { 3 };
    let receiver = Receiver::default();
    let addr = serve_on_loopback(
        Router::new()
            .route("/{path}", post(receive))
            .with_state(receiver.clone()),
    )
    .await;
    let db = TestDb::new().await;
    db.insert_webhook_endpoint("ordered", format!("http://{addr}/first"))
        .await;
    {
        let mut conn = db.connect().await;
        // Two more destinations of the same endpoint, all three ordered.
        for (position, path) in [(2, "second"), (3, "third")] {
            hymical_forms::testing::db::destinations::append(
                &mut conn,
                hymical_forms::testing::db::models::DestinationRow::webhook(
                    support::harness::endpoint("ordered").id,
                    position,
                    format!("http://{addr}/{path}"),
                    support::harness::webhook_secret(),
                    chrono::Utc::now(),
                ),
            )
            .await
            .expect("destination");
        }
        conn.batch_execute("UPDATE destinations SET ordered = true")
            .await
            .expect("ordered");
    }
    let vars = [
        crate::QUICK_DELIVERY,
        &[
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "1000"),
            ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "0.05"),
            ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "0.2"),
        ],
    ]
    .concat();
    let mut servers = vec![
        ServeProcess::start(&db, &vars),
        ServeProcess::start(&db, &vars),
    ];
    for server in &servers {
        wait_for_status(&server.url("/ready"), 200).await;
    }

    // Accepted one after another: each 202 comes before the next post.
    let http = reqwest::Client::new();
    for n in 1..=submissions {
        let server = &servers[(n % 2) as usize];
        let response = post_urlencoded(&http, server.url("/f/ordered"), format!("n={n}"))
            .await
            .expect("post");
        assert_eq!(response.status().as_u16(), 202, "submission {n}");
    }

    // Kill one server while the queues drain, and start another in its place.
    let deadline = Instant::now() + Duration::from_secs(120);
    for kill in 0..kills {
        let wanted = (kill + 1) * (submissions as usize * DESTINATIONS.len()) / (kills + 2);
        while receiver.seen.lock().unwrap().len() < wanted {
            assert!(
                Instant::now() < deadline,
                "deliveries stalled before kill {kill}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let victim = kill % 2;
        servers.remove(victim).kill();
        let fresh = ServeProcess::start(&db, &vars);
        wait_for_status(&fresh.url("/health"), 200).await;
        servers.insert(victim, fresh);
    }
    let view = probe::settled(&db, Duration::from_secs(120)).await;
    assert_eq!(view.pending + view.processing, 0, "settled: {view:?}");

    let seen = receiver.seen.lock().unwrap().clone();
    let mut by_destination: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (path, n) in &seen {
        by_destination.entry(path.as_str()).or_default().push(*n);
    }
    for destination in DESTINATIONS {
        let order = &by_destination[destination];
        let out_of_order: Vec<(usize, u64, u64)> = order
            .windows(2)
            .enumerate()
            .filter(|(_, pair)| pair[1] < pair[0])
            .map(|(at, pair)| (at, pair[0], pair[1]))
            .collect();
        assert!(
            out_of_order.is_empty(),
            "{destination}: a later submission before an earlier one at {out_of_order:?} in {order:?}"
        );
        let mut distinct = order.clone();
        distinct.dedup();
        assert_eq!(
            distinct,
            (1..=submissions).collect::<Vec<_>>(),
            "{destination}: every submission, in order"
        );
    }
    let failures = seen.len() / 5;
    assert!(failures > 0, "the receiver failed some requests");
    eprintln!(
        "ordered: {} requests for {} deliveries ({} answered 503), {kills} kills",
        seen.len(),
        submissions as usize * DESTINATIONS.len(),
        failures
    );
}
