//! Intake throughput against the PostgreSQL ceiling, with the product's defaults.
//!
//! `cargo bench --bench intake` starts a throwaway PostgreSQL cluster with PostgreSQL's
//! durable defaults (`fsync = on`, `synchronous_commit = on`), creates 100 endpoints and
//! one hot one (all with a webhook, so every submission also writes its delivery and
//! event), and serves intake on loopback. The load: `BENCH_CONCURRENCY` keep-alive
//! connections (32), urlencoded 5-field forms, from 1,000 client addresses in turn
//! (`X-Forwarded-For`, one trusted proxy hop), half to the hot endpoint and half spread
//! over the other 100.
//!
//! The baseline, in the same rounds against the same cluster: pgbench running the obvious
//! design at the same concurrency, one transaction per submission with the same three
//! inserts (submission, delivery, event) to the same endpoints. Arms per round:
//!
//! - durable commits: pgbench; intake with rate limiting on (the default; limits raised
//!   to 10⁹ so every request is counted in both scopes and none refused) and intake with
//!   rate limiting off, each arm's seconds cut into slices of `BENCH_SLICE_SECONDS` (2)
//!   and the two arms' slices interleaved, in pairs whose order alternates (on off, off
//!   on, …; off first in even rounds);
//! - durable commits, many browsers at once: intake with limits on and off again, from
//!   `BENCH_WIDE_CONCURRENCY` connections (128) against the same pgbench figure (its 32
//!   clients; pgbench measured no faster with 128, docs/BENCHMARKS.md). With 32
//!   connections intake's rate is bounded by each request's latency (a closed loop);
//!   with more it shows the capacity an operator gets when many browsers submit at once.
//!   0 skips these arms;
//! - `synchronous_commit = off` (the relaxed column): pgbench; intake, limits off.
//!
//! Each intake arm reports accepted/s, CPU per accepted submission (this process, which
//! includes the load generator, and the whole machine), request latency p50/p99, and from
//! the server's `/metrics` the batches' mean size and the mean time of each batch
//! statement (counting, outbox) from sending it to its answer.
//!
//! Before any of it, the cluster's write-ahead log is brought to the state of a server
//! that has been running (`BenchCluster::warm_wal`).
//!
//! After the rounds, **API processes**: the same load (durable commits, limits on, from
//! `BENCH_WIDE_CONCURRENCY` connections spread evenly) against 1, 2 and 4 API-only
//! `hymical-forms serve` processes (`BENCH_API_PROCESSES`, a comma-separated list; empty
//! skips it), each count against a pgbench run just before it: how intake scales with
//! processes against one primary.
//!
//! The endpoints are made with the product's own function (`db::endpoints::insert` with
//! a webhook destination, what `createEndpoint` calls). The pgbench baseline's inserts
//! are the comparison itself (the obvious design, written by hand), not set-up.
//!
//! Settings (in brackets the smoke configuration's, `cargo test --bench intake`):
//! `BENCH_CONCURRENCY` (32 [8], for pgbench and intake alike), `BENCH_WIDE_CONCURRENCY`
//! (128 [16]), `BENCH_SECONDS` per measurement (8 [2]), `BENCH_SLICE_SECONDS` (2 [1]),
//! `BENCH_ROUNDS` (3 [1]), `BENCH_API_PROCESSES` (1,2,4 [1]). The run fails when an arm
//! accepted nothing, or the accepted forms queued no delivery.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use hymical_forms::testing::config::{Config, Secret};
use hymical_forms::testing::db;

mod common;
use common::{
    batch_totals, offer_spread_load, offer_spread_load_to, require, setting, BenchCluster,
    LoadResult,
};

const CLIENTS: usize = 1000;
const ENDPOINTS: usize = 100;

fn endpoint_name(n: usize) -> String {
    format!("bench-{n:03}")
}

fn main() {
    common::announce("intake");
    let concurrency = setting("BENCH_CONCURRENCY", 32, 8) as usize;
    let wide = setting("BENCH_WIDE_CONCURRENCY", 128, 16) as usize;
    let seconds = setting("BENCH_SECONDS", 8, 2);
    let slice = setting("BENCH_SLICE_SECONDS", 2, 1).clamp(1, seconds.max(1));
    let rounds = setting("BENCH_ROUNDS", 3, 1);
    // Warm-ups before measuring: caches, prepared statements, counters.
    let warm_up = setting("BENCH_WARM_UP_SECONDS", 2, 1);
    let runtime = common::runtime();

    let cluster = BenchCluster::start_with(&runtime, true);
    let url = cluster.url.clone();
    let names: Vec<String> = std::iter::once("hot".to_string())
        .chain((0..ENDPOINTS).map(endpoint_name))
        .collect();
    runtime.block_on(async {
        let mut conn = db::connect_one(&url).await.expect("connect");
        for name in &names {
            let id =
                hymical_forms::testing::model::ids::EndpointId::parse(name).expect("endpoint id");
            let webhook = db::models::DestinationRow::webhook(
                id.clone(),
                1,
                "https://receiver.example/hook".into(),
                format!("whsec_{}", "ab".repeat(32)),
                chrono::Utc::now(),
            );
            db::endpoints::insert(
                &mut conn,
                &db::models::EndpointRow::new(id, name.clone(), chrono::Utc::now()),
                Some(webhook),
            )
            .await
            .expect("endpoint");
        }
    });
    // Half the requests to the hot endpoint, half over the other hundred.
    let paths: Vec<String> = (0..2 * ENDPOINTS)
        .map(|i| {
            if i % 2 == 0 {
                "/f/hot".to_string()
            } else {
                format!("/f/{}", endpoint_name(i / 2))
            }
        })
        .collect();

    // The baseline: one transaction per submission, the same three rows, each as the
    // product writes it now (the delivery to the endpoint's webhook destination, read from
    // `destinations` as intake's statement reads it). It is the comparison, not set-up:
    // the smoke run fails here, rather than measuring an old shape, when a column changes.
    let fields = r#"'{"name":["Ada Lovelace"],"email":["ada@example.com"],"topic":["billing"],"message":["Hello there, world"],"consent":["yes"]}'::json"#;
    let id = |prefix: &str| format!("'{prefix}' || lpad(to_hex(:n::bigint), 32, '0')");
    let (submission, delivery) = (id("sub_"), id("whd_"));
    let endpoint =
        "(CASE WHEN :e % 2 = 0 THEN 'hot' ELSE 'bench-' || lpad((:e / 2)::text, 3, '0') END)";
    let baseline = cluster.script(
        "one_transaction_per_submission.sql",
        &format!(
            r#"\set n random(1, 9223372036854775807)
\set e random(0, {last})
BEGIN;
INSERT INTO submissions (id, endpoint_id, received_at, fields) VALUES ({submission}, {endpoint}, now(), {fields});
INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at) SELECT {delivery}, {submission}, d.endpoint_id, d.id, d.url, d.secret, 'pending', 0, 0, now(), now() FROM destinations d WHERE d.endpoint_id = {endpoint} AND d.kind = 'webhook' AND d.removed_at IS NULL;
INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, attempts, cycle_attempts, occurred_at) VALUES ({delivery}, {endpoint}, 'created', 'pending', 0, 0, statement_timestamp());
COMMIT;
"#,
            last = 2 * ENDPOINTS - 1
        ),
    );

    // `/metrics` without a key: the benchmark reads the batches' figures from it.
    let limits_on = [
        ("FORMS_RATE_LIMIT_IP_REQUESTS", "1000000000"),
        ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "1000000000"),
        ("FORMS_TRUSTED_PROXY_HOPS", "1"),
        ("FORMS_METRICS_REQUIRE_KEY", "false"),
    ];
    let limits_off = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_TRUSTED_PROXY_HOPS", "1"),
        ("FORMS_METRICS_REQUIRE_KEY", "false"),
    ];
    let (on, off) = runtime.block_on(async {
        (
            start_server(&url, &limits_on).await,
            start_server(&url, &limits_off).await,
        )
    });

    println!(
        "concurrency {concurrency} (and intake with {wide}), {CLIENTS} client addresses, {ENDPOINTS} endpoints + 1 hot (half the load), {seconds} s per measurement, {rounds} rounds"
    );
    let pgbench = || {
        cluster.pgbench(
            &baseline,
            &[
                "-c".into(),
                concurrency.to_string(),
                "-T".into(),
                seconds.to_string(),
            ],
        )
    };
    let load_from = |addr: SocketAddr, connections: usize, seconds: u64| {
        runtime.block_on(async {
            let before = batch_totals(addr).await;
            let mut result = offer_spread_load(
                addr,
                connections,
                Duration::from_secs(seconds),
                CLIENTS,
                &paths,
            )
            .await;
            result.batches = Some(batch_totals(addr).await.since(&before));
            result
        })
    };
    let load = |addr: SocketAddr, seconds: u64| load_from(addr, concurrency, seconds);
    let show = |name: &str, result: &LoadResult, baseline: f64| {
        println!(
            "    {name}: {:.0}/s = {:.2}× pgbench | CPU per submission: whole machine {:.0} µs, this process {:.0} µs | latency p50 {:.1} ms, p99 {:.1} ms",
            result.rate,
            result.rate / baseline,
            result.cpu_machine_us,
            result.cpu_process_us,
            result.p50_ms,
            result.p99_ms,
        );
        if let Some(batches) = &result.batches {
            println!(
                "        batches of {:.1} on average; per batch, counting {:.2} ms, outbox {:.2} ms (each statement from sending it to its answer)",
                batches.size, batches.count_ms, batches.outbox_ms,
            );
        }
    };
    // Intake with limits on and off, from `connections` connections, against `pg`: each
    // arm's seconds cut into slices of `slice` seconds, the two arms' slices interleaved in
    // pairs whose order alternates (on off, off on, on off …, off first in even rounds), so
    // that a change in the machine's speed during the round, which on this shared host
    // moved single 8-second arms by ±15%, falls on both arms alike.
    let limits_on_and_off = |connections: usize, pg: f64, round: u64| {
        let (mut with_limits, mut without_limits) = (Vec::new(), Vec::new());
        for pair in 0..seconds.div_ceil(slice) {
            if (pair + round) % 2 == 1 {
                with_limits.push(load_from(on, connections, slice));
                without_limits.push(load_from(off, connections, slice));
            } else {
                without_limits.push(load_from(off, connections, slice));
                with_limits.push(load_from(on, connections, slice));
            }
        }
        let with_limits = LoadResult::combined(with_limits);
        let without_limits = LoadResult::combined(without_limits);
        show("intake, limits on (defaults)", &with_limits, pg);
        show("intake, limits off", &without_limits, pg);
        println!(
            "    limits on / limits off: {:.0}%",
            100.0 * with_limits.rate / without_limits.rate
        );
        (pg, with_limits, without_limits)
    };
    // Warm-up: caches, prepared statements, counters.
    load(on, warm_up);
    load(off, warm_up);
    let mut durable: Vec<(f64, LoadResult, LoadResult)> = Vec::new();
    let mut many: Vec<(f64, LoadResult, LoadResult)> = Vec::new();
    let mut relaxed: Vec<(f64, LoadResult)> = Vec::new();
    for round in 1..=rounds {
        runtime.block_on(cluster.set_synchronous_commit(true));
        let pg = pgbench();
        println!(
            "round {round}, durable commits: pgbench one transaction per submission {pg:.0} tps"
        );
        durable.push(limits_on_and_off(concurrency, pg, round));
        if wide > 0 {
            println!("round {round}, durable commits, {wide} connections (pgbench as above):");
            many.push(limits_on_and_off(wide, pg, round));
        }
        runtime.block_on(cluster.set_synchronous_commit(false));
        let pg_relaxed = pgbench();
        let relaxed_load = load(off, seconds);
        println!("round {round}, synchronous_commit off: pgbench {pg_relaxed:.0} tps");
        show("intake, limits off", &relaxed_load, pg_relaxed);
        relaxed.push((pg_relaxed, relaxed_load));
    }
    let mean = |values: &mut dyn Iterator<Item = f64>| {
        let values: Vec<f64> = values.collect();
        values.iter().sum::<f64>() / values.len() as f64
    };
    let pg_relaxed = mean(&mut relaxed.iter().map(|r| r.0));
    let relaxed_rate = mean(&mut relaxed.iter().map(|r| r.1.rate));
    let summary = |name: &str, arms: &[(f64, LoadResult, LoadResult)]| {
        let pg = mean(&mut arms.iter().map(|r| r.0));
        let on_rate = mean(&mut arms.iter().map(|r| r.1.rate));
        let off_rate = mean(&mut arms.iter().map(|r| r.2.rate));
        println!(
            "mean, {name}: pgbench {pg:.0} tps | limits on {on_rate:.0}/s = {:.2}× | limits off {off_rate:.0}/s = {:.2}× | on/off {:.0}% | CPU/submission (machine) on {:.0} µs, off {:.0} µs | p50/p99 on {:.1}/{:.1} ms",
            on_rate / pg,
            off_rate / pg,
            100.0 * on_rate / off_rate,
            mean(&mut arms.iter().map(|r| r.1.cpu_machine_us)),
            mean(&mut arms.iter().map(|r| r.2.cpu_machine_us)),
            mean(&mut arms.iter().map(|r| r.1.p50_ms)),
            mean(&mut arms.iter().map(|r| r.1.p99_ms)),
        );
    };
    for (_, with_limits, without_limits) in durable.iter().chain(&many) {
        require(
            with_limits.rate > 0.0 && without_limits.rate > 0.0,
            "intake: forms accepted, durable arms",
        );
    }
    require(
        relaxed.iter().all(|(_, load)| load.rate > 0.0),
        "intake: forms accepted, relaxed arm",
    );
    // Each accepted form wrote its delivery (the endpoints have a webhook): the arms
    // measure the same three rows as the baseline.
    let queued = runtime.block_on(common::count(
        &url,
        "SELECT count(*) AS count FROM webhook_deliveries WHERE destination_id IS NOT NULL",
    ));
    require(
        queued > 0,
        "intake: deliveries queued by the accepted forms",
    );
    summary(&format!("durable, {concurrency} connections"), &durable);
    if !many.is_empty() {
        summary(&format!("durable, {wide} connections"), &many);
    }
    println!(
        "mean, synchronous_commit off: pgbench {pg_relaxed:.0} tps | limits off {relaxed_rate:.0}/s = {:.2}× | CPU/submission (machine) {:.0} µs",
        relaxed_rate / pg_relaxed,
        mean(&mut relaxed.iter().map(|r| r.1.cpu_machine_us)),
    );

    // API processes against one primary.
    runtime.block_on(cluster.set_synchronous_commit(true));
    let counts: Vec<usize> = std::env::var("BENCH_API_PROCESSES")
        .unwrap_or_else(|_| if common::smoke() { "1" } else { "1,2,4" }.into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let connections = wide.max(concurrency);
    for processes in counts {
        let servers: Vec<(std::process::Child, SocketAddr)> = (0..processes)
            .map(|_| api_process(&url, &limits_on))
            .collect();
        let addrs: Vec<SocketAddr> = servers.iter().map(|(_, addr)| *addr).collect();
        runtime.block_on(async {
            for addr in &addrs {
                common::wait_ready(*addr).await;
            }
        });
        // Warm-up: each process's cache and prepared statements.
        runtime.block_on(offer_spread_load_to(
            &addrs,
            connections,
            Duration::from_secs(warm_up),
            CLIENTS,
            &paths,
        ));
        let pg = pgbench();
        let result = runtime.block_on(offer_spread_load_to(
            &addrs,
            connections,
            Duration::from_secs(seconds),
            CLIENTS,
            &paths,
        ));
        println!("API processes: {processes}, {connections} connections spread over them, durable commits, limits on:");
        show("intake", &result, pg);
        require(
            result.rate > 0.0,
            "intake: forms accepted by the API processes",
        );
        for (mut child, _) in servers {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }
}

/// An API-only `hymical-forms serve` process (no worker) with `vars`, on a free port.
fn api_process(url: &Secret, vars: &[(&str, &str)]) -> (std::process::Child, SocketAddr) {
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hymical-forms"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("FORMS_DATABASE_URL", url.expose())
        .env("FORMS_BIND", addr.to_string())
        .env("FORMS_WORKER_ENABLED", "false")
        .env("FORMS_DATABASE_POOL_SIZE", SERVER_POOL.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    for (name, value) in vars {
        command.env(name, value);
    }
    (command.spawn().expect("start an API process"), addr)
}

/// Intake's writers use two connections; the rest of the pool serves the endpoint cache.
const SERVER_POOL: u32 = 8;

async fn start_server(url: &Secret, vars: &[(&str, &str)]) -> SocketAddr {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config =
        Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .expect("config");
    let app = common::app_state(url, config, SERVER_POOL).await;
    common::serve(app).await
}
