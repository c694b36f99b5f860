//! GraphQL read latency on a large history.
//!
//! `cargo bench --bench graphql` seeds 1,000,000 deliveries over 100 endpoints (mostly
//! delivered, 50,000 failed), each with its submission and one or two attempts, then
//! measures sequential requests through HTTP on loopback:
//! - `deliveries(filter: {state: FAILED}, first: 50)`;
//! - a page of 100 deliveries with endpoint, submission and attempt history;
//! - `deliveryCounts`, for all and for one endpoint.
//!
//! Settings: `BENCH_DELIVERIES` (1000000), `BENCH_FAILED` (50000), `BENCH_SAMPLES` (200).

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Instant;

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use hymical_forms::testing::config::Config;

mod common;
use common::{env_number, BenchCluster};

fn main() {
    let total = env_number("BENCH_DELIVERIES", 1_000_000);
    let failed = env_number("BENCH_FAILED", 50_000);
    let samples = env_number("BENCH_SAMPLES", 200) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // PostgreSQL's durable defaults (reads do not wait for flushes; the seeding session
    // alone commits without waiting, to be quick).
    let cluster = BenchCluster::start_with(&runtime, true);
    let seeded = Instant::now();
    runtime.block_on(async {
        let mut conn = AsyncPgConnection::establish(cluster.url.expose()).await.expect("connect");
        // Triggers are off while seeding (the counts are filled in one statement after,
        // as the migration does); a million row triggers would only slow the set-up.
        conn.batch_execute("SET session_replication_role = replica").await.expect("replica role");
        conn.batch_execute("SET synchronous_commit = off").await.expect("seeding without flush waits");
        conn.batch_execute(&format!(
            "INSERT INTO endpoints (id, name, webhook_url, webhook_secret)
                 SELECT 'bench-' || e, 'Bench ' || e, 'https://hooks.example.com/' || e, 'whsec_' || repeat('ab', 32)
                 FROM generate_series(0, 99) AS e;
             INSERT INTO submissions (id, endpoint_id, received_at, fields)
                 SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'bench-' || (n % 100),
                        timestamptz '2026-01-01' + n * interval '20 seconds',
                        json_build_object('email', json_build_array('user' || n || '@example.com'), 'message', json_build_array('hello'))
                 FROM generate_series(1, {total}) AS n;
             INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at, completed_at)
                 SELECT 'whd_' || lpad(to_hex(n), 32, '0'), 'sub_' || lpad(to_hex(n), 32, '0'), 'bench-' || (n % 100),
                        'https://hooks.example.com/' || (n % 100), 'whsec_' || repeat('ab', 32),
                        CASE WHEN n % ({total} / {failed}) = 0 THEN 'failed' ELSE 'delivered' END,
                        CASE WHEN n % ({total} / {failed}) = 0 THEN 5 ELSE 1 + (n % 2) END,
                        CASE WHEN n % ({total} / {failed}) = 0 THEN 5 ELSE 1 + (n % 2) END,
                        timestamptz '2026-01-01' + n * interval '20 seconds',
                        timestamptz '2026-01-01' + n * interval '20 seconds',
                        timestamptz '2026-01-01' + n * interval '20 seconds' + interval '1 second'
                 FROM generate_series(1, {total}) AS n;
             INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at, outcome, response_status, duration_ms)
                 SELECT 'att_' || lpad(to_hex(n * 8 + a), 32, '0'), 'whd_' || lpad(to_hex(n), 32, '0'), 'sub_' || lpad(to_hex(n), 32, '0'), a,
                        'https://hooks.example.com/' || (n % 100), timestamptz '2026-01-01' + n * interval '20 seconds',
                        CASE WHEN a = 2 OR n % 2 = 0 THEN 'succeeded' ELSE 'http_error' END, CASE WHEN a = 2 OR n % 2 = 0 THEN 200 ELSE 503 END, 12
                 FROM generate_series(1, {total}) AS n, generate_series(1, 1 + (n % 2)) AS a;"
        ))
        .await
        .expect("seed");
        conn.batch_execute(
            "SET session_replication_role = DEFAULT;
             INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
                 SELECT endpoint_id, state, 0, count(*) FROM webhook_deliveries
                 WHERE state IN ('delivered', 'failed') GROUP BY endpoint_id, state;",
        )
        .await
        .expect("counts");
        conn.batch_execute("VACUUM ANALYZE").await.expect("vacuum");
    });
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
