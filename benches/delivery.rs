//! End-to-end delivery: throughput against the PostgreSQL ceiling, and latency at light load.
//!
//! `cargo bench --bench delivery`:
//! 1. **Ceiling.** `pgbench` runs the worker's own statements for one delivery, claim
//!    (`src/db/sql/claim.sql` with `claim_take.sql`, one row) and record (`record_attempts.sql`, one attempt: lock the row,
//!    insert the attempt, update the delivery), each with its event tail, over a queue of
//!    pending deliveries. The worker claims in batches; pgbench claims one row at a time.
//! 2. **Throughput.** Two worker-only `hymical-forms` processes deliver the same number of
//!    queued deliveries (50 endpoints) to a local receiver that answers 200 at once.
//!    Beside each throughput, the busy CPU of the whole machine per delivery (pgbench's
//!    client and the database for the baseline; the workers, the receiver and the
//!    database for ours, with the cost of writing the queue, measured before the
//!    baseline, taken out).
//! 3. **Latency.** One `hymical-forms serve` accepts forms posted one at a time (light
//!    load); for each, the time from the `202` to the receiver's first byte.
//! 4. **Noisy neighbour.** 300 deliveries queued for a receiver that accepts and never
//!    answers (read timeout 3 s), 32 workers; healthy endpoints' forms posted meanwhile:
//!    the time from the POST to their receiver (target: p99 under 1 s, where the dead
//!    backlog would take about 300 / 16 × 3 s to drain).
//!
//! 5. **Hot destination.** 5,000 queued to one endpoint, drained by one worker process.
//!
//! The endpoints and their webhooks are made with the product's own function
//! (`db::endpoints::insert`), and every queue is written by intake's own statement
//! (`db::submissions::insert_batch`: submissions, deliveries, events), so that the queue
//! always has the shape the product gives it.
//!
//! Settings (in brackets the smoke configuration's, `cargo test --bench delivery`):
//! `BENCH_DELIVERIES` (20000 [200]), `BENCH_ROUNDS` (2 [1]), `BENCH_WORKER_PROCESSES`
//! (2 [1]), `BENCH_RELAXED` (0; 1 runs the cluster with `synchronous_commit = off`),
//! `BENCH_LATENCY_SAMPLES` (300 [10]), `BENCH_NEIGHBOUR_SAMPLES` (200 [10]),
//! `BENCH_DEAD_DELIVERIES` (300 [20], the noisy neighbour's backlog),
//! `BENCH_HOT_DELIVERIES` (5000 [100]), `BENCH_HOT_ROUNDS` (3 [1]), `BENCH_ONLY_HOT` (0; 1
//! runs section 5 alone), `BENCH_HOT_CAP` (unset: the default
//! `FORMS_WORKER_ENDPOINT_CONCURRENCY`; the hot section's cap per destination). The run
//! fails when a section measured nothing: no delivery recorded by pgbench or the
//! workers, no latency sample.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use hymical_forms::testing::config::Secret;
use hymical_forms::testing::db;

mod common;
use common::{env_number, require, setting, BenchCluster};

#[derive(Clone, Default)]
struct Receiver {
    count: Arc<AtomicU64>,
    /// Arrival time by submission id, when latency is being measured.
    arrivals: Arc<Mutex<HashMap<String, Instant>>>,
    track: Arc<std::sync::atomic::AtomicBool>,
}

/// A receiver that accepts and never answers (within any read timeout).
async fn never_answers() -> &'static str {
    tokio::time::sleep(Duration::from_secs(60)).await;
    "too late"
}

async fn receive(State(receiver): State<Receiver>, body: Bytes) -> &'static str {
    let arrived = Instant::now();
    receiver.count.fetch_add(1, Ordering::Relaxed);
    if receiver.track.load(Ordering::Relaxed) {
        if let Ok(payload) = serde_json::from_slice::<serde_json::Value>(&body) {
            if let Some(id) = payload["submission"]["id"].as_str() {
                receiver
                    .arrivals
                    .lock()
                    .expect("arrivals")
                    .insert(id.to_string(), arrived);
            }
        }
    }
    "ok"
}

const ENDPOINTS: usize = 50;

fn main() {
    common::announce("delivery");
    let deliveries = setting("BENCH_DELIVERIES", 20_000, 200);
    let processes = setting("BENCH_WORKER_PROCESSES", 2, 1) as usize;
    let rounds = setting("BENCH_ROUNDS", 2, 1);
    let samples = setting("BENCH_LATENCY_SAMPLES", 300, 10) as usize;
    let runtime = common::runtime();
    // PostgreSQL's durable defaults, unless BENCH_RELAXED=1 (synchronous_commit off).
    let relaxed = env_number("BENCH_RELAXED", 0) == 1;
    let cluster = BenchCluster::start_with(&runtime, !relaxed);
    println!(
        "synchronous_commit {}, {processes} worker process(es)",
        if relaxed { "off" } else { "on" }
    );
    let receiver = Receiver::default();
    let receiver_addr: SocketAddr = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = Router::new()
            .route("/hook", post(receive))
            .route("/dead", post(never_answers))
            .with_state(receiver.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        addr
    });
    let endpoints: Vec<(String, Option<String>)> = (0..ENDPOINTS)
        .map(|n| {
            (
                format!("bench-{n}"),
                Some(format!("http://{receiver_addr}/hook")),
            )
        })
        .chain(std::iter::once((
            "dead".to_string(),
            Some(format!("http://{receiver_addr}/dead")),
        )))
        .collect();
    runtime.block_on(common::insert_endpoints(&cluster.url, &endpoints));

    if env_number("BENCH_ONLY_HOT", 0) == 1 {
        hot_destination(&runtime, &cluster, &receiver);
        return;
    }

    let claim_and_record = cluster.script(
        "claim_and_record.sql",
        &common::claim_and_record(&db::queue::CLAIM, &db::queue::RECORD_ATTEMPTS),
    );
    // The same statements without the event tail, to show what writing events costs the
    // database on the worker's path.
    let claim_without_events = db::statement::SqlText::new(concat!(
        include_str!("../src/db/sql/claim.sql"),
        include_str!("../src/db/sql/claim_take.sql"),
        "SELECT * FROM result"
    ));
    let record_without_events = db::statement::SqlText::new(concat!(
        include_str!("../src/db/sql/record_attempts.sql"),
        "SELECT * FROM result"
    ));
    let claim_and_record_without_events = cluster.script(
        "claim_and_record_without_events.sql",
        &common::claim_and_record(&claim_without_events, &record_without_events),
    );

    println!("{deliveries} deliveries per measurement, {ENDPOINTS} endpoints, {rounds} rounds");
    let mut ceiling = Vec::new();
    let mut ours = Vec::new();
    // Busy CPU of the whole machine per delivery, µs: the baseline's, ours.
    let mut ceiling_cpu = Vec::new();
    let mut ours_cpu = Vec::new();
    let clients = 16u64;
    for round in 1..=rounds {
        let transactions = (deliveries / clients) * clients;
        // The baselines' queue: a delivery for each transaction, and a margin.
        let queued = deliveries + clients * 10;
        // What queueing costs the machine per delivery, measured here with nothing else
        // running, so that it can be taken out of our figure below (where the workers
        // already run while the queue is written).
        let (_, queue_started) = common::cpu_seconds();
        runtime.block_on(queue(&cluster.url, queued));
        let queue_cpu = (common::cpu_seconds().1 - queue_started) / queued as f64;
        let (_, pgbench_started) = common::cpu_seconds();
        let pg_tps = cluster.pgbench(
            &claim_and_record,
            &[
                "-c".into(),
                clients.to_string(),
                "-t".into(),
                (deliveries / clients).to_string(),
            ],
        );
        let pgbench_cpu = common::cpu_seconds().1 - pgbench_started;
        let pg_delivered = runtime.block_on(delivered(&cluster.url));
        let pg = pg_tps * pg_delivered as f64 / transactions as f64;
        let pg_cpu = 1e6 * pgbench_cpu / pg_delivered.max(1) as f64;
        runtime.block_on(clear(&cluster.url));
        // The same without the event inserts.
        runtime.block_on(queue(&cluster.url, queued));
        let pg_bare = cluster.pgbench(
            &claim_and_record_without_events,
            &[
                "-c".into(),
                clients.to_string(),
                "-t".into(),
                (deliveries / clients).to_string(),
            ],
        ) * runtime.block_on(delivered(&cluster.url)) as f64
            / transactions as f64;
        runtime.block_on(clear(&cluster.url));
        println!(
            "round {round}: pgbench claim+record without events {pg_bare:.0} tps, with events {pg:.0} tps (events cost {:.0}%)",
            100.0 * (1.0 - pg / pg_bare)
        );

        let workers: Vec<Child> = (0..processes).map(|_| spawn_worker(&cluster.url)).collect();
        std::thread::sleep(Duration::from_secs(2));
        let before = receiver.count.load(Ordering::Relaxed);
        let started = Instant::now();
        let (_, cpu_started) = common::cpu_seconds();
        runtime.block_on(queue(&cluster.url, deliveries));
        runtime.block_on(wait_delivered(&cluster.url, deliveries, &receiver, before));
        let elapsed = started.elapsed().as_secs_f64();
        let rate = deliveries as f64 / elapsed;
        let rate_cpu = 1e6
            * (common::cpu_seconds().1 - cpu_started - queue_cpu * deliveries as f64)
            / deliveries as f64;
        let sent = receiver.count.load(Ordering::Relaxed) - before;
        for worker in workers {
            stop(worker);
        }
        runtime.block_on(clear(&cluster.url));
        println!(
            "round {round}: pgbench claim+record {pg:.0} tps, whole machine {pg_cpu:.0} µs per delivery | {processes} worker process(es) {rate:.0} deliveries/s ({:.0}%), whole machine {rate_cpu:.0} µs per delivery (queueing them, {:.0} µs, taken out), {sent} requests received",
            100.0 * rate / pg,
            1e6 * queue_cpu
        );
        ceiling.push(pg);
        ours.push(rate);
        ceiling_cpu.push(pg_cpu);
        ours_cpu.push(rate_cpu);
    }
    require(
        ceiling.iter().all(|pg| *pg > 0.0),
        "delivery: deliveries recorded by pgbench (the ceiling)",
    );
    require(
        ours.iter().all(|rate| *rate > 0.0),
        "delivery: deliveries made by the worker processes",
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "throughput mean: ceiling {:.0}/s, ours {:.0}/s = {:.0}% of the ceiling | CPU per delivery (whole machine): ceiling {:.0} µs, ours {:.0} µs",
        mean(&ceiling),
        mean(&ours),
        100.0 * mean(&ours) / mean(&ceiling),
        mean(&ceiling_cpu),
        mean(&ours_cpu)
    );

    // Latency at light load: one serve process, one form at a time.
    let port = free_port();
    let serve = spawn_serve(&cluster.url, port);
    let client = reqwest::Client::new();
    runtime.block_on(async {
        common::wait_ready(SocketAddr::from(([127, 0, 0, 1], port))).await;
    });
    receiver.track.store(true, Ordering::Relaxed);
    let mut after_202 = Vec::new();
    let mut after_post = Vec::new();
    runtime.block_on(async {
        for n in 0..samples {
            let posted = Instant::now();
            let response = client
                .post(format!("http://127.0.0.1:{port}/f/bench-{}", n % ENDPOINTS))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("n={n}&email=a%40example.com"))
                .send()
                .await
                .expect("post");
            let accepted = Instant::now();
            assert_eq!(response.status(), 202);
            let receipt: serde_json::Value = response.json().await.expect("receipt");
            let id = receipt["submission_id"].as_str().expect("id").to_string();
            let arrived = loop {
                if let Some(at) = receiver.arrivals.lock().expect("arrivals").get(&id) {
                    break *at;
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            };
            after_202.push(signed_ms(arrived, accepted));
            after_post.push(signed_ms(arrived, posted));
            // Light load: about 20 forms a second.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    stop(serve);
    require(
        !after_202.is_empty(),
        "delivery: latency samples at light load",
    );
    println!(
        "latency over {samples} forms at light load, 202 → receiver's first byte: p50 {:.2} ms, p99 {:.2} ms (POST sent → receiver: p50 {:.2} ms, p99 {:.2} ms)",
        percentile(&mut after_202, 50.0),
        percentile(&mut after_202, 99.0),
        percentile(&mut after_post, 50.0),
        percentile(&mut after_post, 99.0),
    );
    runtime.block_on(clear(&cluster.url));
    noisy_neighbour(&runtime, &cluster.url, &receiver);
    hot_destination(&runtime, &cluster, &receiver);
}

/// Section 5: one hot destination. `BENCH_HOT_DELIVERIES` (5,000) queued to one endpoint,
/// drained by one worker process with the default settings (so at most
/// `FORMS_WORKER_ENDPOINT_CONCURRENCY` requests in flight to it), `BENCH_HOT_ROUNDS` (3)
/// times. Beside the rate, the CPU per delivery of the worker process and of the
/// PostgreSQL server, counted by process (the whole machine's busy time would count
/// whatever else runs on a shared machine), and the receiver's (this process).
fn hot_destination(runtime: &tokio::runtime::Runtime, cluster: &BenchCluster, receiver: &Receiver) {
    let deliveries = setting("BENCH_HOT_DELIVERIES", 5_000, 100);
    let rounds = setting("BENCH_HOT_ROUNDS", 3, 1);
    let postmaster = cluster.postmaster_pid();
    for round in 1..=rounds {
        runtime.block_on(clear(&cluster.url));
        // The queue is written before the worker starts: its cost is not the worker's.
        runtime.block_on(queue_to(&cluster.url, deliveries, 1));
        runtime.block_on(cluster.print_statements("before"));
        let server_before = common::server_cpu_seconds(postmaster);
        let (receiver_before, _) = common::cpu_seconds();
        let before = receiver.count.load(Ordering::Relaxed);
        let started = Instant::now();
        let mut worker = forms(&cluster.url, free_port());
        worker.env("FORMS_API_ENABLED", "false");
        if let Ok(cap) = std::env::var("BENCH_HOT_CAP") {
            worker.env("FORMS_WORKER_ENDPOINT_CONCURRENCY", cap);
        }
        let worker = worker.spawn().expect("start a worker process");
        let worker_pid = worker.id();
        runtime.block_on(wait_delivered(&cluster.url, deliveries, receiver, before));
        let elapsed = started.elapsed().as_secs_f64();
        let worker_cpu = common::child_cpu_seconds(worker_pid);
        let server_cpu = common::server_cpu_seconds(postmaster) - server_before;
        let receiver_cpu = common::cpu_seconds().0 - receiver_before;
        stop(worker);
        runtime.block_on(cluster.print_statements(&format!("hot destination, round {round}")));
        require(
            receiver.count.load(Ordering::Relaxed) - before >= deliveries,
            "delivery: the hot destination's deliveries received",
        );
        let per = |seconds: f64| 1e6 * seconds / deliveries as f64;
        println!(
            "hot destination, round {round}: {deliveries} queued to one endpoint, one worker process: {:.0} deliveries/s (from the worker's start, its start-up included); CPU per delivery: worker {:.0} µs, PostgreSQL {:.0} µs, receiver {:.0} µs, together {:.0} µs",
            deliveries as f64 / elapsed,
            per(worker_cpu),
            per(server_cpu),
            per(receiver_cpu),
            per(worker_cpu + server_cpu + receiver_cpu),
        );
    }
}

/// Section 4: healthy endpoints' delay behind a dead receiver's backlog.
fn noisy_neighbour(runtime: &tokio::runtime::Runtime, url: &Secret, receiver: &Receiver) {
    let samples = setting("BENCH_NEIGHBOUR_SAMPLES", 200, 10) as usize;
    let dead = setting("BENCH_DEAD_DELIVERIES", 300, 20);
    let queued = runtime.block_on(common::queue_submissions(
        url,
        dead,
        |_| "dead".to_string(),
        |_| chrono::Utc::now(),
        |_| serde_json::json!({ "n": ["1"] }),
    ));
    require(
        queued == dead,
        "delivery: the dead receiver's backlog queued",
    );
    let port = free_port();
    let serve = forms(url, port)
        .env("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1")
        .env("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "3")
        .env("FORMS_WORKER_LEASE_SECONDS", "10")
        .env("FORMS_WORKER_CONCURRENCY", "32")
        .spawn()
        .expect("start serve");
    let client = reqwest::Client::new();
    receiver.arrivals.lock().expect("arrivals").clear();
    receiver.track.store(true, Ordering::Relaxed);
    let mut delays = Vec::new();
    runtime.block_on(async {
        common::wait_ready(SocketAddr::from(([127, 0, 0, 1], port))).await;
        // The dead backlog has every slot it may have by now.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut posted = Vec::with_capacity(samples);
        for n in 0..samples {
            let sent = Instant::now();
            let response = client
                .post(format!("http://127.0.0.1:{port}/f/bench-{}", n % ENDPOINTS))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("n={n}"))
                .send()
                .await
                .expect("post");
            let receipt: serde_json::Value = response.json().await.expect("receipt");
            posted.push((
                receipt["submission_id"].as_str().expect("id").to_string(),
                sent,
            ));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        for (id, sent) in posted {
            let arrived = loop {
                if let Some(at) = receiver.arrivals.lock().expect("arrivals").get(&id) {
                    break *at;
                }
                assert!(
                    Instant::now() < deadline,
                    "a healthy delivery never arrived"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            delays.push(signed_ms(arrived, sent));
        }
    });
    stop(serve);
    require(
        !delays.is_empty(),
        "delivery: healthy forms' delays beside the dead backlog",
    );
    println!(
        "noisy neighbour: {dead} deliveries queued for a receiver that never answers; {samples} healthy forms, POST → receiver: p50 {:.1} ms, p99 {:.1} ms (target p99 < 1000 ms)",
        percentile(&mut delays, 50.0),
        percentile(&mut delays, 99.0),
    );
}

/// `later − earlier` in milliseconds, negative when the webhook arrived before the client
/// had read its 202.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    if later >= earlier {
        (later - earlier).as_secs_f64() * 1000.0
    } else {
        -((earlier - later).as_secs_f64() * 1000.0)
    }
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let index = ((p / 100.0) * (values.len() as f64 - 1.0)).round() as usize;
    values[index.min(values.len() - 1)]
}

/// Queues `count` pending deliveries (with their submissions and events) across the
/// endpoints through intake's own statement, which wakes the workers.
async fn queue(url: &Secret, count: u64) {
    queue_to(url, count, ENDPOINTS).await
}

/// [`queue`] across the first `endpoints` endpoints.
async fn queue_to(url: &Secret, count: u64, endpoints: usize) {
    let endpoints = endpoints as u64;
    let queued = common::queue_submissions(
        url,
        count,
        |n| format!("bench-{}", n % endpoints),
        |_| chrono::Utc::now(),
        |n| serde_json::json!({ "n": [n.to_string()], "email": ["a@example.com"] }),
    )
    .await;
    assert_eq!(queued, count, "a delivery for every submission queued");
    let mut conn = AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect");
    conn.batch_execute("ANALYZE submissions, webhook_deliveries")
        .await
        .expect("analyze");
}

/// Removes every delivery, attempt and submission (between measurements).
async fn clear(url: &Secret) {
    let mut conn = AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect");
    conn.batch_execute(
        "TRUNCATE delivery_attempts, webhook_deliveries, submissions, delivery_events CASCADE",
    )
    .await
    .expect("clear");
    conn.batch_execute("VACUUM ANALYZE").await.expect("vacuum");
}

/// How many deliveries are `delivered`.
async fn delivered(url: &Secret) -> u64 {
    let mut conn = AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect");
    delivered_on(&mut conn).await
}

async fn delivered_on(conn: &mut AsyncPgConnection) -> u64 {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Delivered {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let delivered: Delivered =
        diesel::sql_query("SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'delivered'")
            .get_result(conn)
            .await
            .expect("count");
    delivered.n as u64
}

/// Waits until `count` deliveries are recorded as delivered. The receiver's own count is
/// watched first, so the database is asked only at the end: a poll that counted the
/// table through a new connection every few milliseconds cost the machine a share of
/// what is measured (a backend started and a scan of every delivery, 50 times a second).
async fn wait_delivered(url: &Secret, count: u64, receiver: &Receiver, received_before: u64) {
    // Bounded: a queue the workers cannot claim (a setup fault) ends the run.
    let deadline = Instant::now() + Duration::from_secs(600);
    while receiver.count.load(Ordering::Relaxed) - received_before < count {
        assert!(
            Instant::now() < deadline,
            "the deliveries were not delivered within 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut conn = AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect");
    // A receipt is recorded a moment after it arrived (results are recorded in batches).
    while delivered_on(&mut conn).await < count {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The binary the worker and serve processes run: this build's, or another build's named
/// by `BENCH_FORMS_BINARY` (an A/B comparison of two versions under the same harness).
fn forms(url: &Secret, port: u16) -> Command {
    let binary = std::env::var_os("BENCH_FORMS_BINARY")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_hymical-forms").into());
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("FORMS_DATABASE_URL", url.expose())
        .env("FORMS_BIND", format!("127.0.0.1:{port}"))
        .env("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true")
        .env("FORMS_RATE_LIMIT_ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    command
}

fn spawn_worker(url: &Secret) -> Child {
    forms(url, free_port())
        .env("FORMS_API_ENABLED", "false")
        .spawn()
        .expect("start a worker process")
}

fn spawn_serve(url: &Secret, port: u16) -> Child {
    forms(url, port).spawn().expect("start serve")
}

fn stop(mut child: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}
