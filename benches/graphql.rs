//! GraphQL read latency on a large history.
//!
//! `cargo bench --bench graphql` seeds 1,000,000 deliveries over 100 endpoints (mostly
//! delivered, 50,000 failed), each with its submission and one or two attempts, then
//! measures sequential requests through HTTP on loopback:
//! - `deliveries(filter: {state: FAILED}, first: 50)`;
//! - a page of 100 deliveries with endpoint, submission and attempt history;
//! - `deliveryCounts`, for all and for one endpoint.
//!
//! The history is made by the product's own functions: the endpoints with
//! `db::endpoints::insert` (a webhook each), the submissions and their deliveries by
//! intake's statement (`db::submissions::insert_batch`), and the attempts by the worker's
//! claim and record statements (`common::settle_queue`), so its rows, events and counts
//! are the ones the product writes. Every other delivered one failed once first; the
//! failed ones failed on their one attempt.
//!
//! Settings (in brackets the smoke configuration's, `cargo test --bench graphql`):
//! `BENCH_DELIVERIES` (1000000 [2000]), `BENCH_FAILED` (50000 [100]), `BENCH_SAMPLES` (200
//! [5]). The run fails when a query answers no rows where the history has them.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Instant;

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use hymical_forms::testing::config::{Config, Secret};

mod common;
use common::{require, setting, BenchCluster};

fn main() {
    common::announce("graphql");
    let total = setting("BENCH_DELIVERIES", 1_000_000, 2_000);
    let failed = setting("BENCH_FAILED", 50_000, 100).clamp(1, total.max(1));
    let samples = setting("BENCH_SAMPLES", 200, 5) as usize;
    let runtime = common::runtime();
    // PostgreSQL's durable defaults for the measurement (reads do not wait for flushes).
    let cluster = BenchCluster::start_with(&runtime, true);
    let seeded = Instant::now();
    // The seeding's commits need not wait for their flush.
    runtime.block_on(cluster.set_synchronous_commit(false));
    runtime.block_on(seed(&cluster.url, total, failed));
    runtime.block_on(cluster.set_synchronous_commit(true));
    println!(
        "seeded {total} deliveries ({failed} failed) in {:.0} s",
        seeded.elapsed().as_secs_f64()
    );

    let (addr, key) = runtime.block_on(async {
        let config = Config::from_lookup(|_| None).expect("config");
        let key = common::admin_key(&cluster.url).await;
        let app = common::app_state(&cluster.url, config, 8).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let router = hymical_forms::testing::router::router(app);
        tokio::spawn(async move {
            let _ = axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await;
        });
        (addr, key)
    });

    let client = reqwest::Client::new();
    let queries = [
        ("failed deliveries, first 50", "{ deliveries(filter: {state: FAILED}, first: 50) { edges { node { id state completedAt } } pageInfo { endCursor } } }"),
        (
            "page of 100 with endpoint, submission, attempts",
            "{ deliveries(first: 100) { edges { node { id state endpoint { id name } submission { id receivedAt fields { name values } } attemptHistory { number outcome httpStatus durationMs } } } } }",
        ),
        ("deliveryCounts (all)", "{ deliveryCounts { pending processing delivered failed } }"),
        ("deliveryCounts (one endpoint)", "{ deliveryCounts(endpointId: \"bench-7\") { pending processing delivered failed } }"),
    ];
    for (name, query) in queries {
        let mut timings = Vec::with_capacity(samples);
        runtime.block_on(async {
            for round in 0..samples + 10 {
                let started = Instant::now();
                let response = client
                    .post(format!("http://{addr}/graphql"))
                    .header("authorization", format!("Bearer {key}"))
                    .json(&serde_json::json!({ "query": query }))
                    .send()
                    .await
                    .expect("request");
                let body: serde_json::Value = response.json().await.expect("json");
                assert!(body.get("errors").is_none(), "{body}");
                // Every query here finds something in the seeded history: an empty
                // answer means the seed no longer makes what it is meant to.
                if round == 0 {
                    require(
                        answered_rows(&body),
                        &format!("graphql: rows answered to {name}"),
                    );
                }
                // The first ten warm caches and prepared statements.
                if round >= 10 {
                    timings.push(started.elapsed().as_secs_f64() * 1000.0);
                }
            }
        });
        timings.sort_by(|a, b| a.total_cmp(b));
        let at = |p: f64| timings[((p / 100.0) * (timings.len() as f64 - 1.0)).round() as usize];
        println!(
            "{name}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({samples} requests)",
            at(50.0),
            at(99.0),
            at(100.0)
        );
    }
}

/// Whether an answer carries rows: a list with an element, or a count above 0.
fn answered_rows(body: &serde_json::Value) -> bool {
    let data = &body["data"];
    if let Some(counts) = data["deliveryCounts"].as_object() {
        return counts.values().any(|n| n.as_i64().unwrap_or(0) > 0);
    }
    data["deliveries"]["edges"]
        .as_array()
        .is_some_and(|edges| !edges.is_empty())
}

/// `total` deliveries over 100 endpoints (received 20 s apart from 2026-01-01), `failed`
/// of them failed, every other delivered one on its second attempt; the statistics
/// fresh.
async fn seed(url: &Secret, total: u64, failed: u64) {
    let endpoints: Vec<(String, Option<String>)> = (0..100)
        .map(|e| {
            (
                format!("bench-{e}"),
                Some(format!("https://hooks.example.com/{e}")),
            )
        })
        .collect();
    common::insert_endpoints(url, &endpoints).await;
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("start")
        .with_timezone(&chrono::Utc);
    let queued = common::queue_submissions(
        url,
        total,
        |n| format!("bench-{}", n % 100),
        |n| start + chrono::Duration::seconds(20 * n as i64),
        |n| {
            serde_json::json!({
                "email": [format!("user{n}@example.com")],
                "message": ["hello"],
            })
        },
    )
    .await;
    require(queued == total, "graphql: deliveries queued by the seed");
    let every = (total / failed).max(1);
    let attempts = common::settle_queue(
        url,
        |k| {
            if k % every == every - 1 {
                common::Fate::Failed
            } else if k % 2 == 1 {
                common::Fate::DeliveredOnRetry
            } else {
                common::Fate::Delivered
            }
        },
        |received| received + chrono::Duration::seconds(1),
    )
    .await;
    require(attempts >= total, "graphql: attempts recorded by the seed");
    let mut conn = AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect");
    conn.batch_execute("VACUUM ANALYZE").await.expect("vacuum");
}
