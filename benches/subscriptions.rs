//! GraphQL subscriptions: fan-out latency under a steady stream of changes, and what
//! connected subscribers cost the intake.
//!
//! `cargo bench --bench subscriptions` starts a throwaway PostgreSQL cluster and serves the
//! router in this process (with the subscription services of `serve`: the `LISTEN`
//! connection, the event reader, the revocation check), then:
//! 1. **Fan-out latency.** `BENCH_SUBSCRIBERS` WebSocket clients (`graphql-transport-ws`,
//!    one connection each) subscribe to every event, unfiltered. Forms are posted at a
//!    steady `BENCH_RATE` per second to an endpoint whose webhook points at a receiver in
//!    this process that answers 200 at once; the worker runs in-process, so each delivery
//!    makes three events (created, claimed, delivered). After a warm-up, for `BENCH_SECONDS`
//!    and until the queue drains, every receipt of an event by a subscriber gives a latency:
//!    the receipt time minus the event's `occurredAt` (`statement_timestamp()` of the
//!    change, so just before its commit: an upper bound of commit → receipt). Every
//!    subscriber must receive every event of the window exactly once, in increasing `id`.
//! 2. **Intake cost.** The intake benchmark's load generator (`common::offer_spread_load`:
//!    raw HTTP/1.1 on 32 keep-alive connections from 1,000 client addresses, rate limits on,
//!    an endpoint with a webhook, no worker: the queue grows) in alternating rounds: A
//!    without subscribers; B with
//!    `BENCH_SUBSCRIBERS` failure dashboards connected (`states: [FAILED]`: every event is
//!    read and matched, none sent, since intake fails nothing); C with as many subscribers
//!    of every event (each accepted form is then sent to every one of them).
//!
//! The subscribers run in this process, on the same two cores as the server and
//! PostgreSQL: their own cost (receiving and parsing every frame) is part of the figures.
//! They run on threads of their own, whose CPU time is reported apart from the server's.
//!
//! The cluster runs with PostgreSQL's durable defaults (`fsync`, `synchronous_commit = on`)
//! and the server with rate limiting on (limits too high to refuse anything: their
//! counters are kept as in production); `BENCH_RELAXED=1` runs the cluster with
//! `synchronous_commit = off` instead, for the second column.
//!
//! The endpoints are made through the API (`createEndpoint`, with a webhook), as an
//! operator makes them. Every client is 127.0.0.1, so the servers run without the cap of
//! connections per address (`FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS=0`, as behind a
//! proxy): 1,000 subscribers and 32 load connections are past its default of 1,024.
//!
//! Settings (full configuration; in brackets the smoke one's, `cargo test --bench
//! subscriptions`): `BENCH_SUBSCRIBERS` (1000 [20]), `BENCH_RATE` forms per second (67
//! [20]: three state changes each, so about 200 deliveries change state per second),
//! `BENCH_SECONDS` of the latency window (20 [3]), `BENCH_CONCURRENCY` of the intake load
//! (32 [8]), `BENCH_INTAKE_SECONDS` per intake round (8 [2]), `BENCH_ROUNDS` per intake
//! arm (4 [1]; 0 skips the intake measurement), `BENCH_QUERY` the subscription document
//! (default `deliveryStateChanged { id state occurredAt delivery { id } }`). The run fails
//! when a phase produced no figures: no event in the window, no webhook received, no
//! receipt, no accepted form in an arm.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use diesel_async::AsyncPgConnection;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use hymical_forms::testing::config::{Config, Secret};
use hymical_forms::testing::db;
use hymical_forms::testing::services::{Plan, Services};

mod common;
use common::{
    cpu_seconds, env_number, offer_spread_load, require, setting, BenchCluster, FORM_BODY,
};

/// Rate limits on, as in production, but high enough never to refuse the load: the
/// counters are written on every request.
const LIMITS_ON: [(&str, &str); 2] = [
    ("FORMS_RATE_LIMIT_IP_REQUESTS", "1000000000"),
    ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "1000000000"),
];
/// Every subscriber and load connection comes from 127.0.0.1: no cap per address.
const NO_ADDRESS_CAP: (&str, &str) = ("FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS", "0");
/// Client addresses the intake load comes from.
const CLIENTS: usize = 1000;

/// The subscription every subscriber runs, unless `BENCH_QUERY` gives another (it must
/// select `id` and `occurredAt` of `deliveryStateChanged`).
const SUBSCRIPTION: &str =
    "subscription { deliveryStateChanged { id state occurredAt delivery { id } } }";
/// What an alerting dashboard watches: failures only. Every event is still read and
/// matched in the server; only failures are sent.
const ALERTING_SUBSCRIPTION: &str =
    "subscription { deliveryStateChanged(states: [FAILED]) { id state occurredAt delivery { id } } }";
/// Subscribers that may be in their WebSocket handshake at once.
const CONNECTING: usize = 50;
/// The name of the subscribers' threads (at most 15 bytes: Linux truncates it).
const CLIENT_THREAD: &str = "bench-client";
/// Before the fan-out window (1 s in the smoke configuration).
fn warm_up() -> Duration {
    Duration::from_secs(setting("BENCH_WARM_UP_SECONDS", 3, 1))
}
/// How long the queue and then the subscribers may take to finish after the load stops.
const DRAIN: Duration = Duration::from_secs(30);

fn main() {
    common::announce("subscriptions");
    let subscribers = setting("BENCH_SUBSCRIBERS", 1000, 20) as usize;
    let rate = setting("BENCH_RATE", 67, 20);
    let seconds = setting("BENCH_SECONDS", 20, 3);
    let concurrency = setting("BENCH_CONCURRENCY", 32, 8) as usize;
    let intake_seconds = setting("BENCH_INTAKE_SECONDS", 8, 2);
    let rounds = setting("BENCH_ROUNDS", 4, 1);
    raise_open_files_limit((4 * subscribers + 1024) as nix::libc::rlim_t);
    let runtime = common::runtime();
    // The subscribers run on threads of their own, so that their CPU time can be told
    // apart from the server's.
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CLIENT_THREAD)
        .enable_all()
        .build()
        .expect("client runtime");
    // PostgreSQL's durable defaults, unless BENCH_RELAXED=1 (synchronous_commit off).
    let relaxed = env_number("BENCH_RELAXED", 0) == 1;
    let cluster = BenchCluster::start_with(&runtime, !relaxed);
    println!(
        "cluster: synchronous_commit = {}; rate limits on",
        if relaxed { "off" } else { "on" }
    );
    let url = cluster.url.clone();

    let receiver_count = Arc::new(AtomicU64::new(0));
    let receiver_addr = runtime.block_on(start_receiver(receiver_count.clone()));
    let key = runtime.block_on(common::admin_key(&url));

    // 1. Fan-out latency.
    println!("subscription: {}", query());
    println!(
        "fan-out: {subscribers} subscribers, {rate} forms/s (3 events each), {} s warm-up, {seconds} s window",
        warm_up().as_secs()
    );
    let server = runtime.block_on(Server::start(
        &url,
        &[
            ("FORMS_DATABASE_POOL_SIZE", "16"),
            LIMITS_ON[0],
            LIMITS_ON[1],
            NO_ADDRESS_CAP,
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
        ],
        true,
    ));
    // Both phases' endpoints, through the API: `fanout`'s webhook goes to the receiver
    // here; `bench`'s to an address never reached (the intake phase runs no worker).
    runtime.block_on(async {
        let hook = format!("http://{receiver_addr}/hook");
        common::create_endpoint(server.addr, &key, "fanout", Some(&hook)).await;
        common::create_endpoint(
            server.addr,
            &key,
            "bench",
            Some("https://receiver.example/hook"),
        )
        .await;
    });
    runtime.block_on(fan_out(
        clients.handle(),
        &url,
        server.addr,
        &key,
        FanOut {
            subscribers,
            rate,
            window: Duration::from_secs(seconds),
        },
        &receiver_count,
    ));
    runtime.block_on(server.stop());

    // 2. Intake with and without subscribers.
    if rounds == 0 {
        return;
    }
    println!(
        "\nintake cost: concurrency {concurrency}, {intake_seconds} s per round, {rounds} rounds per arm (A without subscribers, B with {subscribers})"
    );
    let pool_size = concurrency.to_string();
    let server = runtime.block_on(Server::start(
        &url,
        &[
            ("FORMS_DATABASE_POOL_SIZE", pool_size.as_str()),
            LIMITS_ON[0],
            LIMITS_ON[1],
            NO_ADDRESS_CAP,
            ("FORMS_TRUSTED_PROXY_HOPS", "1"),
        ],
        false,
    ));
    runtime.block_on(intake_cost(
        &cluster,
        clients.handle(),
        server.addr,
        &key,
        subscribers,
        concurrency,
        Duration::from_secs(intake_seconds),
        rounds,
    ));
    runtime.block_on(server.stop());
}

/// 1,000 client sockets and as many server sockets live in this process.
fn raise_open_files_limit(wanted: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((current, max)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if current < wanted {
        let raised = wanted.min(max);
        if setrlimit(Resource::RLIMIT_NOFILE, raised, max).is_err() || raised < wanted {
            println!("warning: open files limited to {raised} (wanted {wanted})");
        }
    }
}

/// A webhook receiver that answers 200 at once.
async fn start_receiver(count: Arc<AtomicU64>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Router::new().route(
        "/hook",
        post(move || {
            let count = count.clone();
            async move {
                count.fetch_add(1, Ordering::Relaxed);
                "ok"
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// The product's services in-process, as `serve` starts them.
struct Server {
    addr: SocketAddr,
    services: Services,
}

impl Server {
    async fn start(url: &Secret, vars: &[(&str, &str)], worker: bool) -> Server {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = Config::from_lookup(|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .expect("config");
        let pool_size = config.database.pool_size;
        let app = common::app_state(url, config, pool_size).await;
        let workers = worker.then(|| hymical_forms::testing::delivery::Senders {
            webhook: hymical_forms::testing::delivery::client::WebhookClient::new(
                &app.config.webhook,
                Arc::new(hymical_forms::testing::outbound::SystemResolver),
            )
            .expect("webhook client"),
            mail: None,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = hymical_forms::testing::http::server::Limits::from_config(&app.config);
        let services = Services::start(
            &app,
            Plan {
                http: Some((listener, limits)),
                metrics: None,
                workers,
                sweeper: false,
                retention: false,
                pruning: false,
            },
        );
        Server { addr, services }
    }

    async fn stop(self) {
        self.services.stop_token().cancel();
        if tokio::time::timeout(Duration::from_secs(15), self.services.wait())
            .await
            .is_err()
        {
            println!("warning: the server did not stop within 15 s");
        }
    }
}

/// What one subscriber saw.
#[derive(Default)]
struct Tally {
    /// Every `next` received.
    receipts: u64,
    /// (id − the window's start, latency in µs) of each receipt of an event in the window.
    window: Vec<(u32, u32)>,
    /// Receipts whose id was not above the previous one (duplicates or disorder).
    out_of_order: u64,
    /// Receipt time before `occurredAt` (clamped to 0 in the latencies).
    negative: u64,
    /// The first thing that was not a `next` with an event, and anything that ended the
    /// subscription early.
    problem: Option<String>,
}

#[derive(serde::Deserialize)]
struct Frame<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    payload: Option<Payload<'a>>,
}

#[derive(serde::Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    data: Option<Data<'a>>,
}

#[derive(serde::Deserialize)]
struct Data<'a> {
    #[serde(rename = "deliveryStateChanged", borrow)]
    event: Event<'a>,
}

#[derive(serde::Deserialize)]
struct Event<'a> {
    id: &'a str,
    #[serde(rename = "occurredAt")]
    occurred_at: &'a str,
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What a subscriber reads at most per read.
const SUBSCRIBER_READ_BUFFER_BYTES: usize = 16 * 1024;

/// Opens a connection, authenticates, subscribes to every event.
async fn subscribe(addr: SocketAddr, key: &str, query: &str) -> Result<Socket, String> {
    let mut request = format!("ws://{addr}/graphql/ws")
        .into_client_request()
        .map_err(|e| e.to_string())?;
    request.headers_mut().insert(
        "sec-websocket-protocol",
        HeaderValue::from_static("graphql-transport-ws"),
    );
    // The library zeroes a whole read buffer before every read: at its default 128 KiB
    // that alone was a sixth of the machine, spent by the subscribers on the server's
    // cores. The frames they read are small; the buffer grows for a larger one.
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(SUBSCRIBER_READ_BUFFER_BYTES);
    let (mut socket, _) =
        tokio_tungstenite::connect_async_with_config(request, Some(config), false)
            .await
            .map_err(|e| format!("connect: {e}"))?;
    let init = serde_json::json!({
        "type": "connection_init",
        "payload": { "Authorization": format!("Bearer {key}") }
    });
    socket
        .send(Message::Text(init.to_string().into()))
        .await
        .map_err(|e| format!("send init: {e}"))?;
    match socket.next().await {
        Some(Ok(Message::Text(text))) if text.as_str().contains("\"connection_ack\"") => {}
        other => return Err(format!("expected connection_ack, got {other:?}")),
    }
    let subscribe = serde_json::json!({
        "type": "subscribe",
        "id": "1",
        "payload": { "query": query }
    });
    socket
        .send(Message::Text(subscribe.to_string().into()))
        .await
        .map_err(|e| format!("send subscribe: {e}"))?;
    Ok(socket)
}

fn query() -> String {
    std::env::var("BENCH_QUERY").unwrap_or_else(|_| SUBSCRIPTION.to_string())
}

/// Connects `count` subscribers, at most [`CONNECTING`] handshakes at a time.
async fn connect_all(
    clients: &tokio::runtime::Handle,
    addr: SocketAddr,
    key: &str,
    query: &str,
    count: usize,
) -> Vec<Socket> {
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        let gate = gate.clone();
        let key = key.to_string();
        let query = query.to_string();
        tasks.push(clients.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("gate");
            subscribe(addr, &key, &query).await
        }));
    }
    let mut sockets = Vec::with_capacity(count);
    let mut failures = 0;
    for task in tasks {
        match task.await.expect("connect task") {
            Ok(socket) => sockets.push(socket),
            Err(error) => {
                if failures == 0 {
                    println!("    subscriber failed to connect: {error}");
                }
                failures += 1;
            }
        }
    }
    if failures > 0 {
        println!("    {failures} of {count} subscribers failed to connect");
    }
    sockets
}

/// How a subscriber treats its frames.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Parses each event: id order, latency.
    Measure,
    /// Only counts frames.
    Count,
}

/// Reads `socket` until `stop`, then closes it.
async fn run_subscriber(
    mut socket: Socket,
    reading: Reading,
    window_start: Arc<AtomicI64>,
    receipts: Arc<AtomicU64>,
    last_seen: Arc<AtomicI64>,
    mut stop: watch::Receiver<bool>,
) -> Tally {
    let mut tally = Tally::default();
    let mut last_id = i64::MIN;
    loop {
        let message = tokio::select! {
            message = socket.next() => message,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let received = chrono::Utc::now();
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
            Some(Ok(other)) => {
                tally.problem.get_or_insert(format!("unexpected {other:?}"));
                break;
            }
            Some(Err(error)) => {
                tally
                    .problem
                    .get_or_insert(format!("socket error: {error}"));
                break;
            }
            None => {
                tally.problem.get_or_insert("socket closed".into());
                break;
            }
        };
        if reading == Reading::Count {
            tally.receipts += 1;
            continue;
        }
        let frame: Frame = match serde_json::from_str(text.as_str()) {
            Ok(frame) => frame,
            Err(_) => {
                tally
                    .problem
                    .get_or_insert(format!("unparsed frame: {}", text.as_str()));
                continue;
            }
        };
        let event = match (frame.kind, frame.payload) {
            (
                "next",
                Some(Payload {
                    data: Some(Data { event }),
                }),
            ) => event,
            ("ping", _) => {
                let _ = socket
                    .send(Message::Text(r#"{"type":"pong"}"#.into()))
                    .await;
                continue;
            }
            _ => {
                tally
                    .problem
                    .get_or_insert(format!("unexpected frame: {}", text.as_str()));
                if frame.kind == "error" || frame.kind == "complete" {
                    break;
                }
                continue;
            }
        };
        let (Ok(id), Ok(occurred)) = (
            event.id.parse::<i64>(),
            chrono::DateTime::parse_from_rfc3339(event.occurred_at),
        ) else {
            tally
                .problem
                .get_or_insert(format!("unparsed event: {}", text.as_str()));
            continue;
        };
        tally.receipts += 1;
        receipts.fetch_add(1, Ordering::Relaxed);
        if id <= last_id {
            tally.out_of_order += 1;
        }
        last_id = last_id.max(id);
        last_seen.store(last_id, Ordering::Relaxed);
        let start = window_start.load(Ordering::Relaxed);
        if id > start {
            let micros = (received - occurred.with_timezone(&chrono::Utc))
                .num_microseconds()
                .unwrap_or(i64::MAX);
            if micros < 0 {
                tally.negative += 1;
            }
            tally
                .window
                .push(((id - start) as u32, micros.clamp(0, u32::MAX as i64) as u32));
        }
    }
    let _ = socket.close(None).await;
    tally
}

/// One row of three numbers (the third may be a numeric sum; given as text).
async fn numbers(conn: &mut AsyncPgConnection, sql: &str) -> (i64, i64, i128) {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        a: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        b: i64,
        #[diesel(sql_type = diesel::sql_types::Text)]
        c: String,
    }
    let row: Row = diesel::sql_query(sql)
        .get_result(conn)
        .await
        .expect("query");
    (row.a, row.b, row.c.parse().expect("a whole number"))
}

/// The shape of the fan-out measurement.
struct FanOut {
    subscribers: usize,
    /// Forms posted per second.
    rate: u64,
    window: Duration,
}

async fn fan_out(
    clients: &tokio::runtime::Handle,
    url: &Secret,
    addr: SocketAddr,
    key: &str,
    FanOut {
        subscribers,
        rate,
        window,
    }: FanOut,
    receiver_count: &AtomicU64,
) {
    let mut conn = db::connect_one(url).await.expect("connect");
    let connecting = Instant::now();
    let sockets = connect_all(clients, addr, key, &query(), subscribers).await;
    let connected = sockets.len();
    println!(
        "    {connected} subscribers connected in {:.1} s",
        connecting.elapsed().as_secs_f64()
    );
    let window_start = Arc::new(AtomicI64::new(i64::MAX));
    let receipts = Arc::new(AtomicU64::new(0));
    let (stop, stopping) = watch::channel(false);
    let mut progress = Vec::with_capacity(connected);
    let mut readers = Vec::with_capacity(connected);
    for socket in sockets {
        let last_seen = Arc::new(AtomicI64::new(i64::MIN));
        progress.push(last_seen.clone());
        readers.push(clients.spawn(run_subscriber(
            socket,
            Reading::Measure,
            window_start.clone(),
            receipts.clone(),
            last_seen,
            stopping.clone(),
        )));
    }
    let reading_started = Instant::now();
    // The server registers a subscription when it first polls it; give it a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let client = reqwest::Client::new();
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let first_refusal = Arc::new(std::sync::Mutex::new(None::<String>));
    let (stop_load, load_stopping) = watch::channel(false);
    let load = {
        let accepted = accepted.clone();
        let refused = refused.clone();
        let first_refusal = first_refusal.clone();
        let target = format!("http://{addr}/f/fanout");
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut posts = tokio::task::JoinSet::new();
            while !*load_stopping.borrow() {
                ticks.tick().await;
                let client = client.clone();
                let target = target.clone();
                let accepted = accepted.clone();
                let refused = refused.clone();
                let first_refusal = first_refusal.clone();
                posts.spawn(async move {
                    let response = client
                        .post(target)
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(FORM_BODY)
                        .send()
                        .await;
                    let refusal = match response {
                        Ok(response) if response.status() == 202 => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        Ok(response) => format!("status {}", response.status()),
                        Err(error) => format!("{error:?}"),
                    };
                    refused.fetch_add(1, Ordering::Relaxed);
                    first_refusal
                        .lock()
                        .expect("refusal")
                        .get_or_insert(refusal);
                });
                while posts.try_join_next().is_some() {}
            }
            while posts.join_next().await.is_some() {}
        })
    };
    tokio::time::sleep(warm_up()).await;
    // Subscribers record from a lower bound set before the window's start is read: an
    // event after the start may be published and received before the start is known, and
    // must still be recorded. Receipts between the two are dropped in the count below.
    let max_event_id =
        "SELECT coalesce(max(id), 0) AS a, 0::bigint AS b, '0' AS c FROM delivery_events";
    let (recorded_after, _, _) = numbers(&mut conn, max_event_id).await;
    window_start.store(recorded_after, Ordering::Relaxed);
    let (start_id, _, _) = numbers(&mut conn, max_event_id).await;
    let transactions_before = transactions(&mut conn).await;
    let cpu_before = cpu_seconds();
    let clients_before = client_cpu_seconds();
    let receipts_before = receipts.load(Ordering::Relaxed);
    let window_started = Instant::now();
    let accepted_before = accepted.load(Ordering::Relaxed);
    tokio::time::sleep(window).await;
    let _ = stop_load.send(true);
    load.await.expect("load");
    let posted = accepted.load(Ordering::Relaxed) - accepted_before;
    let posting = window_started.elapsed().as_secs_f64();

    // Let the worker finish the queue, then the subscribers catch up with the last event.
    let drain_started = Instant::now();
    loop {
        let (open, _, _) = numbers(
            &mut conn,
            "SELECT count(*) AS a, 0::bigint AS b, '0' AS c FROM webhook_deliveries WHERE state IN ('pending', 'processing')",
        )
        .await;
        if open == 0 {
            break;
        }
        if drain_started.elapsed() > DRAIN {
            println!(
                "    warning: {open} deliveries still open {} s after the load stopped",
                DRAIN.as_secs()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (last_id, events, id_sum) = numbers(
        &mut conn,
        &format!(
            "SELECT coalesce(max(id), 0) AS a, count(*) AS b, coalesce(sum(id), 0)::text AS c FROM delivery_events WHERE id > {start_id}"
        ),
    )
    .await;
    let catch_up_started = Instant::now();
    while progress
        .iter()
        .any(|seen| seen.load(Ordering::Relaxed) < last_id)
        && catch_up_started.elapsed() < DRAIN
        && !readers.iter().all(|reader| reader.is_finished())
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let caught_up_after = catch_up_started.elapsed().as_secs_f64();
    let reached: Vec<i64> = progress
        .iter()
        .map(|seen| seen.load(Ordering::Relaxed))
        .collect();
    let slowest = reached.iter().copied().min().unwrap_or(i64::MIN).max(0);
    let fastest = reached.iter().copied().max().unwrap_or(i64::MIN).max(0);
    let elapsed = window_started.elapsed().as_secs_f64();
    let reading = reading_started.elapsed().as_secs_f64();
    let (process, machine) = cpu_seconds();
    let clients_cpu = client_cpu_seconds();
    let receipts_now = receipts.load(Ordering::Relaxed);
    let transactions_after = transactions(&mut conn).await;
    let _ = stop.send(true);
    let mut tallies = Vec::with_capacity(readers.len());
    for reader in readers {
        tallies.push(reader.await.expect("subscriber"));
    }

    let expected = events as u64 * subscribers as u64;
    // Only events up to the last one counted in the database: if the queue did not drain,
    // later ones kept coming.
    let mut latencies: Vec<u32> = Vec::with_capacity(expected as usize);
    let mut complete = 0;
    let mut short = 0;
    for tally in &tallies {
        let mut count = 0u64;
        let mut sum = 0i128;
        for &(offset, micros) in &tally.window {
            let id = recorded_after + offset as i64;
            if id > start_id && id <= last_id {
                count += 1;
                sum += id as i128;
                latencies.push(micros);
            }
        }
        if count == events as u64 && sum == id_sum && tally.out_of_order == 0 {
            complete += 1;
        }
        if count < events as u64 {
            short += 1;
        }
    }
    let received = latencies.len() as u64;
    let out_of_order: u64 = tallies.iter().map(|t| t.out_of_order).sum();
    let negative: u64 = tallies.iter().map(|t| t.negative).sum();
    let mut problems: Vec<&str> = tallies
        .iter()
        .filter_map(|t| t.problem.as_deref())
        .collect();
    let problem_count = problems.len();
    problems.dedup();
    let refusals = refused.load(Ordering::Relaxed);
    println!(
        "    window: {posted} forms accepted in {posting:.1} s ({:.0}/s), {refusals} refused{}; {events} events (ids {}..={last_id}); {} webhooks received in all",
        posted as f64 / posting,
        match first_refusal.lock().expect("refusal").as_deref() {
            Some(first) if refusals > 0 => format!(" (first: {first})"),
            _ => String::new(),
        },
        start_id + 1,
        receiver_count.load(Ordering::Relaxed),
    );
    println!(
        "    receipts: {received} of {expected} expected ({events} events × {subscribers} subscribers, {:.2}%); waited {caught_up_after:.1} s after the queue drained (at most {} s)",
        100.0 * received as f64 / expected.max(1) as f64,
        DRAIN.as_secs(),
    );
    let all_receipts: u64 = tallies.iter().map(|t| t.receipts).sum();
    println!(
        "    all receipts, warm-up included: {all_receipts} ({:.0}/s over {reading:.1} s); highest id received: slowest subscriber {slowest}, fastest {fastest}, last event {last_id}",
        all_receipts as f64 / reading,
    );
    println!(
        "    exactly once, in id order: {complete} of {subscribers} subscribers; {short} short of events; {out_of_order} receipts out of order or repeated; {} subscribers not connected",
        subscribers - connected
    );
    if problem_count > 0 {
        println!(
            "    {problem_count} subscribers saw something else, e.g. {}",
            problems.first().copied().unwrap_or_default()
        );
    }
    let window_receipts = receipts_now - receipts_before;
    println!(
        "    CPU over the window and drain ({elapsed:.1} s, {window_receipts} receipts): server and load in this process {:.2} cores, subscribers {:.2} cores, whole machine {:.2} cores; per receipt: server {:.1} µs, subscriber {:.1} µs",
        (process - clients_cpu - cpu_before.0 + clients_before) / elapsed,
        (clients_cpu - clients_before) / elapsed,
        (machine - cpu_before.1) / elapsed,
        (process - clients_cpu - cpu_before.0 + clients_before) / window_receipts.max(1) as f64 * 1e6,
        (clients_cpu - clients_before) / window_receipts.max(1) as f64 * 1e6,
    );
    println!(
        "    database: {:.0} transactions/s over the window and drain (all connections; the statistics lag by up to a second)",
        (transactions_after - transactions_before) as f64 / elapsed
    );
    require(
        events > 0,
        "fan-out: events in the window (state changes of deliveries)",
    );
    require(
        receiver_count.load(Ordering::Relaxed) > 0,
        "fan-out: webhooks received",
    );
    require(
        !latencies.is_empty(),
        "fan-out: receipts of events by subscribers",
    );
    latencies.sort_unstable();
    let at = |p: f64| {
        latencies[((p / 100.0) * (latencies.len() as f64 - 1.0)).round() as usize] as f64 / 1000.0
    };
    println!(
        "    latency of the receipts that arrived, occurredAt → receipt: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} receipts; {negative} before occurredAt, counted as 0)",
        at(50.0),
        at(95.0),
        at(99.0),
        at(100.0),
        latencies.len()
    );
}

/// Transactions committed and rolled back in this database so far.
async fn transactions(conn: &mut AsyncPgConnection) -> i64 {
    // A new transaction sees fresh statistics, not the snapshot of an earlier one.
    let (count, _, _) = numbers(
        conn,
        "SELECT (xact_commit + xact_rollback)::bigint AS a, 0::bigint AS b, '0' AS c FROM pg_stat_database WHERE datname = current_database()",
    )
    .await;
    count
}

/// CPU seconds of the subscribers' threads.
fn client_cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0.0;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != CLIENT_THREAD {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        // utime and stime, the 14th and 15th fields of stat.
        for index in [11, 12] {
            ticks += fields
                .get(index)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    ticks / 100.0
}

/// One intake round from [`CLIENTS`] addresses: the accepted rate (the CPU per accepted
/// submission and the latency printed). The CPU is given for this process, for the
/// PostgreSQL server (counted by process, so that it tells the database's share from
/// whatever else runs on a shared machine) and for the whole machine. With
/// `BENCH_STATEMENTS=1`, the round's statements by time.
async fn intake_round(
    cluster: &BenchCluster,
    label: &str,
    addr: SocketAddr,
    concurrency: usize,
    duration: Duration,
) -> f64 {
    // Forgets the statements before the round (printing them, when asked).
    cluster.print_statements("between rounds").await;
    let postmaster = cluster.postmaster_pid();
    let database_before = common::server_cpu_seconds(postmaster);
    let result = offer_spread_load(
        addr,
        concurrency,
        duration,
        CLIENTS,
        &["/f/bench".to_string()],
    )
    .await;
    let database = common::server_cpu_seconds(postmaster) - database_before;
    let accepted = (result.rate * duration.as_secs_f64()).max(1.0);
    println!(
        "    CPU per accepted submission: this process {:.0} µs, PostgreSQL {:.0} µs, whole machine {:.0} µs; latency p50 {:.1} ms, p99 {:.1} ms",
        result.cpu_process_us,
        1e6 * database / accepted,
        result.cpu_machine_us,
        result.p50_ms,
        result.p99_ms
    );
    cluster.print_statements(label).await;
    result.rate
}

#[allow(clippy::too_many_arguments)] // the run's shape, each named at the call
async fn intake_cost(
    cluster: &BenchCluster,
    clients: &tokio::runtime::Handle,
    addr: SocketAddr,
    key: &str,
    subscribers: usize,
    concurrency: usize,
    duration: Duration,
    rounds: u64,
) {
    // Warm-up: fills caches and prepared statements on every connection.
    intake_round(
        cluster,
        "warm-up",
        addr,
        concurrency,
        Duration::from_secs(2),
    )
    .await;
    let arms = [
        ("B, failures dashboards", ALERTING_SUBSCRIPTION.to_string()),
        ("C, every event", query()),
    ];
    println!("arm B subscribes to: {ALERTING_SUBSCRIPTION}");
    println!("arm C subscribes to: {}", query());
    let mut without = Vec::new();
    let mut with: Vec<Vec<f64>> = vec![Vec::new(); arms.len()];
    // Frames the subscribers of every event (arm C) received, all rounds together.
    let mut every_event_frames = 0;
    for round in 1..=rounds {
        let a = intake_round(cluster, "A", addr, concurrency, duration).await;
        println!("round {round} A, no subscribers: {a:.0}/s");
        without.push(a);
        for (arm, (name, query)) in arms.iter().enumerate() {
            let sockets = connect_all(clients, addr, key, query, subscribers).await;
            let connected = sockets.len();
            let (stop, stopping) = watch::channel(false);
            let readers: Vec<_> = sockets
                .into_iter()
                .map(|socket| {
                    clients.spawn(run_subscriber(
                        socket,
                        Reading::Count,
                        Arc::new(AtomicI64::new(i64::MAX)),
                        Arc::new(AtomicU64::new(0)),
                        Arc::new(AtomicI64::new(i64::MIN)),
                        stopping.clone(),
                    ))
                })
                .collect();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let started = Instant::now();
            let b = intake_round(cluster, name, addr, concurrency, duration).await;
            let elapsed = started.elapsed().as_secs_f64();
            let _ = stop.send(true);
            let mut frames = 0;
            let mut problems = 0;
            for reader in readers {
                let tally = reader.await.expect("subscriber");
                frames += tally.receipts;
                problems += usize::from(tally.problem.is_some());
            }
            println!(
                "round {round} {name}, {connected} subscribers: {b:.0}/s ({:.0}% of A); subscribers received {:.0} frames/s{}",
                100.0 * b / a,
                frames as f64 / elapsed,
                if problems > 0 {
                    format!("; {problems} subscriptions ended early")
                } else {
                    String::new()
                }
            );
            with[arm].push(b);
            if arm == 1 {
                every_event_frames += frames;
            }
            // Let the server finish closing the subscriptions before the next round.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let a = median(&mut without);
    println!("median: without subscribers {a:.0}/s");
    require(a > 0.0, "intake cost: forms accepted without subscribers");
    require(
        every_event_frames > 0,
        "intake cost: frames received by subscribers of every event",
    );
    for ((name, _), results) in arms.iter().zip(with.iter_mut()) {
        let b = median(results);
        require(b > 0.0, "intake cost: forms accepted beside subscribers");
        println!(
            "median: {name}, {subscribers} subscribers {b:.0}/s = {:.0}% of A ({:+.0}%)",
            100.0 * b / a,
            100.0 * (b - a) / a
        );
    }
}
