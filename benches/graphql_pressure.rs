//! Intake's latency while GraphQL clients press on the database.
//!
//! `cargo bench --bench graphql_pressure` serves the product on loopback (pool of 16, the
//! defaults: GraphQL may hold 8 of them, 50 calls an operation) over 100 endpoints, and
//! measures intake (`BENCH_CONCURRENCY` keep-alive connections posting forms, rate limits
//! off) in three arms, interleaved in slices of `BENCH_SLICE_SECONDS` over `BENCH_ROUNDS`
//! rounds so that the machine's drift falls on all of them alike:
//! - alone;
//! - beside `BENCH_GRAPHQL_CLIENTS` (4) clients each sending, as fast as it is answered,
//!   the alias attack found from outside: `endpoints(first:100){nodes{deliveryCounts{pending}}}`
//!   under 499 aliases (34 KB; about 50,000 queries before list fields were priced);
//! - beside as many clients each sending the costliest kind of document the limits admit:
//!   two pages of 100 endpoints with their counts and a page of 100 deliveries with their
//!   endpoints and attempt histories, in a loop.
//!
//! It prints intake's p50, p99 and worst latency and its rate per arm, their ratios to the
//! arm alone, and what the GraphQL clients got (answers, refusals, storage errors).
//!
//! The endpoints are made through the API (`createEndpoint`).
//!
//! Settings (in brackets the smoke configuration's, `cargo test --bench
//! graphql_pressure`): `BENCH_CONCURRENCY` (8 [4]), `BENCH_SLICE_SECONDS` (2 [1]),
//! `BENCH_ROUNDS` (5 [1]), `BENCH_GRAPHQL_CLIENTS` (4 [2]). The run fails when an arm
//! accepted no form, or its GraphQL clients got no answer at all.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hymical_forms::testing::config::Config;

mod common;
use common::{offer_spread_load, require, setting, BenchCluster, LoadResult};

/// What the GraphQL clients of an arm got.
#[derive(Default)]
struct Pressure {
    answered: AtomicU64,
    refused: AtomicU64,
    storage_errors: AtomicU64,
}

fn main() {
    common::announce("graphql_pressure");
    let concurrency = setting("BENCH_CONCURRENCY", 8, 4) as usize;
    let slice = Duration::from_secs(setting("BENCH_SLICE_SECONDS", 2, 1));
    let rounds = setting("BENCH_ROUNDS", 5, 1);
    let clients = setting("BENCH_GRAPHQL_CLIENTS", 4, 2) as usize;
    let runtime = common::runtime();
    let cluster = BenchCluster::start_with(&runtime, true);
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_WORKER_ENABLED", "false"),
    ];
    let config = Config::from_lookup(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    })
    .expect("config");
    let (addr, key) = runtime.block_on(async {
        let key = common::admin_key(&cluster.url).await;
        let pool_size = config.database.pool_size;
        let app = common::app_state(&cluster.url, config, pool_size).await;
        let addr = common::serve(app).await;
        let endpoints: Vec<(String, Option<String>)> =
            (0..100).map(|e| (format!("bench-{e}"), None)).collect();
        common::create_endpoints(addr, &key, &endpoints).await;
        (addr, key)
    });
    let paths: Vec<String> = (0..100).map(|e| format!("/f/bench-{e}")).collect();

    let aliases: String = (0..499)
        .map(|i| {
            format!("a{i}: endpoints(first: 100) {{ nodes {{ deliveryCounts {{ pending }} }} }} ")
        })
        .collect();
    let attack = format!("{{ {aliases} }}");
    let heavy = "{ a: endpoints(first: 100) { nodes { id name deliveryCounts { pending processing delivered failed } } } \
                 b: endpoints(first: 100) { nodes { id isActive deliveryCounts { failed } } } \
                 deliveries(first: 100) { edges { node { id state endpoint { id name } attemptHistory { number outcome } } } } }";

    let arms: [(&str, Option<&str>); 3] = [
        ("intake alone", None),
        ("beside the alias attack", Some(attack.as_str())),
        ("beside the costliest admitted documents", Some(heavy)),
    ];
    let mut results: Vec<Vec<LoadResult>> = arms.iter().map(|_| Vec::new()).collect();
    let pressures: Vec<Arc<Pressure>> = arms.iter().map(|_| Arc::default()).collect();
    // Warm the pool, the caches and the prepared statements.
    runtime.block_on(offer_spread_load(addr, concurrency, slice, 100, &paths));
    for _ in 0..rounds {
        for (index, (_, document)) in arms.iter().enumerate() {
            let stop = Arc::new(AtomicBool::new(false));
            let pressing: Vec<_> = document
                .map(|document| {
                    (0..clients)
                        .map(|_| {
                            runtime.spawn(press(
                                addr,
                                key.clone(),
                                document.to_string(),
                                stop.clone(),
                                pressures[index].clone(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let result = runtime.block_on(offer_spread_load(addr, concurrency, slice, 100, &paths));
            stop.store(true, Ordering::SeqCst);
            for task in pressing {
                runtime.block_on(task).expect("GraphQL client");
            }
            results[index].push(result);
        }
    }
    let combined: Vec<LoadResult> = results.into_iter().map(LoadResult::combined).collect();
    let alone = &combined[0];
    for (((name, document), result), pressure) in arms.iter().zip(&combined).zip(&pressures) {
        require(
            result.rate > 0.0,
            &format!("graphql_pressure: forms accepted, {name}"),
        );
        let got =
            pressure.answered.load(Ordering::SeqCst) + pressure.refused.load(Ordering::SeqCst);
        require(
            document.is_none() || got > 0,
            &format!("graphql_pressure: answers to the GraphQL clients, {name}"),
        );
    }
    for (((name, _), result), pressure) in arms.iter().zip(&combined).zip(&pressures) {
        println!(
            "{name}: intake p50 {:.2} ms ({:.2}x), p99 {:.2} ms ({:.2}x), worst {:.1} ms ({:.2}x), {:.0}/s ({:.0}%); GraphQL: {} answered, {} refused, {} storage errors",
            result.p50_ms,
            result.p50_ms / alone.p50_ms,
            result.p99_ms,
            result.p99_ms / alone.p99_ms,
            result.max_ms,
            result.max_ms / alone.max_ms,
            result.rate,
            100.0 * result.rate / alone.rate,
            pressure.answered.load(Ordering::SeqCst),
            pressure.refused.load(Ordering::SeqCst),
            pressure.storage_errors.load(Ordering::SeqCst),
        );
    }
}

/// Sends `document` again and again until `stop`, noting what came back.
async fn press(
    addr: SocketAddr,
    key: String,
    document: String,
    stop: Arc<AtomicBool>,
    pressure: Arc<Pressure>,
) {
    let client = reqwest::Client::new();
    let body = serde_json::json!({ "query": document }).to_string();
    while !stop.load(Ordering::SeqCst) {
        let response = client
            .post(format!("http://{addr}/graphql"))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("request");
        let answer: serde_json::Value = response.json().await.expect("json");
        let codes: Vec<&str> = answer["errors"]
            .as_array()
            .map(|errors| {
                errors
                    .iter()
                    .filter_map(|e| e["extensions"]["code"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        if codes.contains(&"QUERY_TOO_COMPLEX") {
            pressure.refused.fetch_add(1, Ordering::SeqCst);
        } else if codes.contains(&"STORAGE_UNAVAILABLE") {
            pressure.storage_errors.fetch_add(1, Ordering::SeqCst);
        } else {
            assert!(answer.get("errors").is_none(), "{answer}");
            pressure.answered.fetch_add(1, Ordering::SeqCst);
        }
    }
}
