//! What the benchmarks share: a throwaway PostgreSQL cluster, pgbench, CPU accounting, and
//! the intake load generator.

#![allow(dead_code)] // each benchmark uses its own subset

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use hymical_forms::testing::config::Secret;
use hymical_forms::testing::db;
use hymical_forms::testing::embedded;

/// The multi-threaded runtime a benchmark runs its clients and in-process server on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The service's state on `url` with `config`, its pool as `serve` opens it.
pub async fn app_state(
    url: &Secret,
    config: hymical_forms::testing::config::Config,
    pool_size: u32,
) -> hymical_forms::testing::app::AppState {
    let settings = db::ConnectionSettings::new(url, &config.database).expect("settings");
    let pool = db::Db::connect(settings.clone(), pool_size, config.database.call_timeout())
        .await
        .expect("pool");
    hymical_forms::testing::app::App::new(
        config,
        settings,
        pool,
        Arc::new(hymical_forms::testing::clock::SystemClock),
    )
}

/// An admin management key stored in the database at `url`; returns the key.
pub async fn admin_key(url: &Secret) -> String {
    let new_key = hymical_forms::testing::auth::generate(
        "bench",
        hymical_forms::testing::model::state::KeyRole::Admin,
        chrono::Utc::now(),
    );
    let mut conn = db::connect_one(url).await.expect("connection");
    db::keys::insert(&mut conn, &new_key.row)
        .await
        .expect("key");
    new_key.key.expose().to_string()
}

/// Serves `app` on a loopback port with the service's own HTTP server, and starts intake's
/// writers (group commit) as `serve` does.
pub async fn serve(app: hymical_forms::testing::app::AppState) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    for writer in app.intake.committer.writers(
        app.db.clone(),
        app.clock.clone(),
        tokio_util::sync::CancellationToken::new(),
        None,
    ) {
        tokio::spawn(writer);
    }
    let limits = hymical_forms::testing::http::server::Limits::from_config(&app.config);
    let router = hymical_forms::testing::router::router(app);
    tokio::spawn(hymical_forms::testing::http::server::serve(
        listener,
        router,
        limits,
        std::future::pending(),
    ));
    addr
}

pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether this is the smoke configuration: a few seconds of each measurement, to show
/// that the benchmark still measures what it says (`cargo xtask test` runs every
/// benchmark so, through `cargo test --bench '*'`). `cargo bench` passes `--bench` to the
/// binary and gets the full configuration; `cargo test` passes nothing and gets the smoke
/// one. `BENCH_SMOKE=1` or `0` decides either way.
pub fn smoke() -> bool {
    static SMOKE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SMOKE.get_or_init(|| match std::env::var("BENCH_SMOKE").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => !std::env::args().any(|arg| arg == "--bench"),
    })
}

/// A setting from its environment variable, else its default for the configuration this
/// run has ([`smoke`]).
pub fn setting(name: &str, full: u64, smoke_default: u64) -> u64 {
    env_number(name, if smoke() { smoke_default } else { full })
}

/// Ends the run with a failure when a figure it should have produced is missing (`held`
/// false): a benchmark whose set-up no longer matches the product measures nothing, and
/// must say so rather than print zeros.
pub fn require(held: bool, figure: &str) {
    if !held {
        eprintln!("benchmark produced no figure: {figure}");
        std::process::exit(1);
    }
}

/// Prints which configuration runs; the first line of every benchmark's output.
pub fn announce(name: &str) {
    if smoke() {
        println!("{name}: smoke configuration (cargo test / BENCH_SMOKE=1): its figures show only that it runs");
    } else {
        println!("{name}: full configuration");
    }
}

/// A GraphQL request to the product's API on `addr` with a management key; the answer's
/// `data`. Any error in the answer ends the run: set-up goes through the API, as an
/// operator's would, so that a benchmark's data always has the shape the product gives it.
pub async fn graphql(
    addr: SocketAddr,
    key: &str,
    query: &str,
    variables: serde_json::Value,
) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/graphql"))
        .header("authorization", format!("Bearer {key}"))
        .json(&serde_json::json!({ "query": query, "variables": variables }))
        .send()
        .await
        .expect("graphql request");
    let body: serde_json::Value = response.json().await.expect("graphql answer");
    assert!(body.get("errors").is_none(), "GraphQL refused: {body}");
    body["data"].clone()
}

/// Creates an endpoint through the API (`createEndpoint`), with a webhook to `webhook_url`
/// as its first destination when given (a server that accepts it: a loopback receiver
/// needs `FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS=true`).
pub async fn create_endpoint(addr: SocketAddr, key: &str, id: &str, webhook_url: Option<&str>) {
    let data = graphql(
        addr,
        key,
        "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }",
        serde_json::json!({ "input": { "id": id, "name": id, "webhookUrl": webhook_url } }),
    )
    .await;
    assert_eq!(data["createEndpoint"]["endpoint"]["id"], id, "{data}");
}

/// Creates endpoints with the product's own function (`db::endpoints::insert`, what
/// `createEndpoint` calls), each with a webhook to its URL as its first destination when
/// given, for a benchmark that has no API server yet when it sets up.
pub async fn insert_endpoints(url: &Secret, endpoints: &[(String, Option<String>)]) {
    let mut conn = db::connect_one(url).await.expect("connect");
    for (name, webhook_url) in endpoints {
        let id = hymical_forms::testing::model::ids::EndpointId::parse(name).expect("endpoint id");
        let webhook = webhook_url.as_ref().map(|webhook_url| {
            db::models::DestinationRow::webhook(
                id.clone(),
                1,
                webhook_url.clone(),
                format!("whsec_{}", "ab".repeat(32)),
                chrono::Utc::now(),
            )
        });
        let created = db::endpoints::insert(
            &mut conn,
            &db::models::EndpointRow::new(id, name.clone(), chrono::Utc::now()),
            webhook,
        )
        .await
        .expect("endpoint");
        assert!(created, "endpoint {name} exists already");
    }
}

/// Queues `count` submissions through intake's own statement (`db::submissions::
/// insert_batch`, outbox_insert_batch.sql: each submission, a pending delivery per
/// destination of its endpoint, their events, the workers woken), 1,000 a statement,
/// none claimed. Submission `n` (from 0) goes to `endpoint(n)`, received at
/// `received_at(n)`, with `fields(n)`. Answers the deliveries queued.
pub async fn queue_submissions(
    url: &Secret,
    count: u64,
    endpoint: impl Fn(u64) -> String,
    received_at: impl Fn(u64) -> chrono::DateTime<chrono::Utc>,
    fields: impl Fn(u64) -> serde_json::Value,
) -> u64 {
    use hymical_forms::testing::model::ids::{DeliveryId, EndpointId, SubmissionId};
    let mut conn = db::connect_one(url).await.expect("connect");
    let mut queued = 0;
    let mut from = 0;
    while from < count {
        let to = (from + 1000).min(count);
        let batch: Vec<db::submissions::NewSubmission> = (from..to)
            .map(|n| db::submissions::NewSubmission {
                id: SubmissionId::generate(),
                endpoint_id: EndpointId::parse(&endpoint(n)).expect("endpoint id"),
                received_at: received_at(n),
                fields: fields(n),
                idempotency: None,
                delivery_id: DeliveryId::generate(),
                claim_token: None,
                spam_reasons: None,
                files: Vec::new(),
                trace_parent: None,
            })
            .collect();
        let refs: Vec<&db::submissions::NewSubmission> = batch.iter().collect();
        let written = db::submissions::insert_batch(
            &mut conn,
            &refs,
            None,
            db::submissions::IntakeClaim::NONE,
            &db::rate_limits::BatchCounters::default(),
        )
        .await
        .expect("queue submissions");
        queued += written.iter().filter(|w| w.delivery_queued).count() as u64;
        from = to;
    }
    queued
}

/// What [`settle_queue`] makes of one claimed delivery, on its first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Delivered,
    /// A failed attempt (503), then a successful one.
    DeliveredOnRetry,
    /// A failed attempt (503) that ends it.
    Failed,
}

/// Works off every pending delivery as the worker does, through its own statements (the
/// claim, `db::queue::claim`, and the recording of attempts, `db::queue::record_attempts`,
/// with their events and counts), without sending anything: delivery number `k` in the
/// order claimed meets `fate(k)`; each attempt is dated `attempted_at(received_at)`.
/// Answers the attempts recorded. Bounded: it stops when a claim finds nothing, and fails
/// the run after twice as many claims as a clean pass needs.
pub async fn settle_queue(
    url: &Secret,
    fate: impl Fn(u64) -> Fate,
    attempted_at: impl Fn(chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc>,
) -> u64 {
    use db::queue::{AttemptRecord, ClaimRequest, OwnerTransition};
    use hymical_forms::testing::model::ids::AttemptId;
    use hymical_forms::testing::model::state::AttemptOutcome;
    const BATCH: u32 = 1000;
    let mut conn = db::connect_one(url).await.expect("connect");
    let pending = count(
        url,
        "SELECT count(*) AS count FROM webhook_deliveries WHERE state = 'pending'",
    )
    .await as u64;
    let mut claimed_so_far = 0u64;
    let mut recorded = 0u64;
    for _ in 0..(4 * pending / u64::from(BATCH) + 10) {
        let claimed = db::queue::claim(
            &mut conn,
            ClaimRequest {
                now: None,
                lease: Duration::from_secs(600),
                limit: BATCH,
                // No cap per destination: nothing is sent.
                destination_concurrency: BATCH,
            },
        )
        .await
        .expect("claim");
        if claimed.is_empty() {
            return recorded;
        }
        let ids: Vec<AttemptId> = claimed.iter().map(|_| AttemptId::generate()).collect();
        let batch: Vec<(AttemptRecord, OwnerTransition)> = claimed
            .iter()
            .zip(&ids)
            .map(|(delivery, attempt_id)| {
                // A delivery claimed again is one whose first attempt failed with a retry.
                let fate = if delivery.cycle_attempts > 0 {
                    Fate::Delivered
                } else {
                    claimed_so_far += 1;
                    fate(claimed_so_far - 1)
                };
                let (outcome, status, transition) = match fate {
                    Fate::Delivered => (AttemptOutcome::Succeeded, 200, OwnerTransition::Delivered),
                    Fate::DeliveredOnRetry => (
                        AttemptOutcome::HttpError,
                        503,
                        OwnerTransition::Retry {
                            after: Duration::ZERO,
                        },
                    ),
                    Fate::Failed => (AttemptOutcome::HttpError, 503, OwnerTransition::Failed),
                };
                let received = delivery.received_at.unwrap_or_else(chrono::Utc::now);
                (
                    AttemptRecord {
                        attempt_id,
                        delivery_id: &delivery.id,
                        claim_token: &delivery.claim_token,
                        destination_url: &delivery.destination_url,
                        attempted_at: attempted_at(received),
                        duration_ms: 12,
                        outcome,
                        response_status: Some(status),
                        error: None,
                        reply: None,
                    },
                    transition,
                )
            })
            .collect();
        let answers = db::queue::record_attempts(&mut conn, &batch, None)
            .await
            .expect("record attempts");
        recorded += answers.iter().flatten().count() as u64;
    }
    panic!("the queue did not settle: claims kept finding deliveries");
}

/// The one whole number `sql` answers (as a column named `count`): a read, for checking
/// what a benchmark's load left in the database.
pub async fn count(url: &Secret, sql: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        count: i64,
    }
    let mut conn = db::connect_one(url).await.expect("connect");
    diesel::sql_query(sql)
        .get_result::<Count>(&mut conn)
        .await
        .expect("count")
        .count
}

/// [`create_endpoint`] for many, a few requests at a time.
pub async fn create_endpoints(addr: SocketAddr, key: &str, endpoints: &[(String, Option<String>)]) {
    use futures_util::StreamExt;
    futures_util::stream::iter(endpoints)
        .for_each_concurrent(8, |(id, url)| {
            create_endpoint(addr, key, id, url.as_deref())
        })
        .await;
}

/// A migrated database on a throwaway cluster, deleted when the benchmark exits.
pub struct BenchCluster {
    pub url: Secret,
    pub root: PathBuf,
    pub bin_dir: PathBuf,
    _server: Option<embedded::RunningServer>,
}

impl BenchCluster {
    /// A cluster with PostgreSQL's defaults (`fsync = on`, `synchronous_commit = on`)
    /// when `durable`, or with `synchronous_commit = off`.
    pub fn start_with(runtime: &tokio::runtime::Runtime, durable: bool) -> BenchCluster {
        let root =
            std::env::temp_dir().join(format!("hymical-bench-{}", uuid::Uuid::new_v4().simple()));
        let cluster = embedded::Cluster::new(&root).expect("PostgreSQL server binaries");
        cluster.hand_root_to_server_user().expect("cluster dir");
        cluster.initialize().expect("initdb");
        // `synchronous_commit` is not set here: a `-c` setting on the server's command line
        // outranks `ALTER SYSTEM`, and `set_synchronous_commit` changes it during a run.
        let settings = embedded::ServerSettings {
            extra: {
                let mut extra = vec![("max_connections".into(), "300".into())];
                // BENCH_STATEMENTS=1: pg_stat_statements loaded, for a profile of where the
                // database's time goes ([`BenchCluster::print_statements`]).
                if env_number("BENCH_STATEMENTS", 0) == 1 {
                    extra.push((
                        "shared_preload_libraries".into(),
                        "pg_stat_statements".into(),
                    ));
                }
                extra
            },
            remove_after_stop: true,
            port: None,
        };
        let (started, connection) = cluster.ensure_running(&settings).expect("start PostgreSQL");
        let server = match started {
            embedded::Started::ByUs(server) => Some(server),
            embedded::Started::AlreadyRunning => None,
        };
        let url = connection.url(embedded::DATABASE);
        runtime.block_on(async {
            db::create_database_if_missing(&connection.url("postgres"), embedded::DATABASE)
                .await
                .expect("database");
            db::migrations::run_pending(&url).await.expect("migrate");
        });
        let cluster = BenchCluster {
            url,
            root,
            bin_dir: embedded::find_bin_dir().expect("bin dir"),
            _server: server,
        };
        // A gigabyte of WAL written: seconds the smoke configuration does without, as its
        // figures are not compared with anything.
        if !smoke() {
            runtime.block_on(cluster.warm_wal());
        }
        // Without `durable`, commits do not wait for their WAL flush, and the ratio shows
        // the cost of our own code more than the disk's.
        runtime.block_on(cluster.set_synchronous_commit(durable));
        cluster
    }

    /// Brings the new cluster's write-ahead log to the state of one that has been running.
    ///
    /// A fresh cluster has no WAL segments to spare: until a checkpoint recycles old ones,
    /// each 16 MB of WAL needs a new segment file, which PostgreSQL creates by writing 16 MB
    /// of zeros and flushing them while every commit waits (`IO:WALInitWrite`, and the
    /// committers behind it on `LWLock:WALWrite`). The benchmarks write about a segment a
    /// second, so their first minutes measured those stalls, not the steady state an
    /// operator's server runs in (docs/BENCHMARKS.md, "The first minutes of a fresh
    /// cluster"). Here a segment switch per 16 MB makes `max_wal_size` worth of segments
    /// (64, with its default of 1 GB), and a checkpoint then keeps them for recycling.
    pub async fn warm_wal(&self) {
        use diesel_async::RunQueryDsl;
        let mut conn = db::connect_one(&self.url).await.expect("connect");
        diesel::sql_query(
            "DO $$ BEGIN
                 FOR segment IN 1 .. pg_size_bytes(current_setting('max_wal_size'))
                                      / pg_size_bytes(current_setting('wal_segment_size')) LOOP
                     -- A switch with nothing written since the last one does nothing.
                     PERFORM pg_logical_emit_message(false, 'hymical-bench-warm-up', '');
                     PERFORM pg_switch_wal();
                 END LOOP;
             END $$",
        )
        .execute(&mut conn)
        .await
        .expect("make WAL segments");
        diesel::sql_query("CHECKPOINT")
            .execute(&mut conn)
            .await
            .expect("checkpoint");
    }

    /// Sets `synchronous_commit` for every session, open ones included (a reload).
    pub async fn set_synchronous_commit(&self, on: bool) {
        use diesel_async::RunQueryDsl;
        let mut conn = db::connect_one(&self.url).await.expect("connect");
        let value = if on { "on" } else { "off" };
        diesel::sql_query(format!("ALTER SYSTEM SET synchronous_commit = {value}"))
            .execute(&mut conn)
            .await
            .expect("alter system");
        diesel::sql_query("SELECT pg_reload_conf()")
            .execute(&mut conn)
            .await
            .expect("reload");
        // Backends read the file when they next go idle.
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A new session (pgbench's, say) must see the value: a setting on the server's
        // command line would silently outrank the one just made.
        #[derive(diesel::QueryableByName)]
        struct Setting {
            #[diesel(sql_type = diesel::sql_types::Text)]
            synchronous_commit: String,
        }
        let mut fresh = db::connect_one(&self.url).await.expect("connect");
        let seen: Setting = diesel::sql_query("SHOW synchronous_commit")
            .get_result(&mut fresh)
            .await
            .expect("show");
        assert_eq!(
            seen.synchronous_commit, value,
            "synchronous_commit not applied"
        );
    }

    /// Writes a pgbench script readable by the server's user.
    /// With `BENCH_STATEMENTS=1`, prints the statements that took the most of the
    /// database's time since the last call, and forgets them.
    pub async fn print_statements(&self, label: &str) {
        if env_number("BENCH_STATEMENTS", 0) != 1 {
            return;
        }
        use diesel_async::RunQueryDsl;
        #[derive(diesel::QueryableByName)]
        struct Statement {
            #[diesel(sql_type = diesel::sql_types::Text)]
            query: String,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            calls: i64,
            #[diesel(sql_type = diesel::sql_types::Double)]
            total_ms: f64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            rows: i64,
        }
        let mut conn = db::connect_one(&self.url).await.expect("connect");
        diesel::sql_query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&mut conn)
            .await
            .expect("pg_stat_statements");
        let top: Vec<Statement> = diesel::sql_query(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query, calls,
                    total_exec_time AS total_ms, rows
             FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12",
        )
        .load(&mut conn)
        .await
        .expect("statements");
        println!("{label}: the database's statements by time");
        for s in top {
            println!(
                "  {:>8.1} ms {:>7} calls {:>7.3} ms/call {:>7} rows  {}",
                s.total_ms,
                s.calls,
                s.total_ms / s.calls.max(1) as f64,
                s.rows,
                s.query
            );
        }
        diesel::sql_query("SELECT pg_stat_statements_reset()")
            .execute(&mut conn)
            .await
            .expect("reset");
    }

    /// The server's postmaster process, from `postmaster.pid` under the cluster's root.
    pub fn postmaster_pid(&self) -> u32 {
        fn find(dir: &Path) -> Option<PathBuf> {
            for entry in std::fs::read_dir(dir).ok()?.flatten() {
                let path = entry.path();
                if path.file_name().is_some_and(|n| n == "postmaster.pid") {
                    return Some(path);
                }
                if path.is_dir() {
                    if let Some(found) = find(&path) {
                        return Some(found);
                    }
                }
            }
            None
        }
        let file = find(&self.root).expect("postmaster.pid under the cluster root");
        std::fs::read_to_string(file)
            .expect("postmaster.pid")
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .expect("postmaster pid")
    }

    pub fn script(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root.join(name);
        std::fs::write(&path, text).expect("script");
        let _ =
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644));
        path
    }

    /// Runs pgbench with `args` (plus `-n -M prepared -j 2`) and returns its tps.
    pub fn pgbench(&self, script: &Path, args: &[String]) -> f64 {
        let output = Command::new(self.bin_dir.join("pgbench"))
            .args(["-n", "-M", "prepared", "-j", "2"])
            .args(args)
            .arg("-f")
            .arg(script)
            .arg(self.url.expose())
            .output()
            .expect("run pgbench");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "pgbench failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
            .lines()
            .find(|line| line.starts_with("tps = "))
            .and_then(|line| line.trim_start_matches("tps = ").split_whitespace().next())
            .and_then(|tps| tps.parse().ok())
            .expect("pgbench tps line")
    }
}

/// (CPU seconds of this process, busy CPU seconds of the whole machine).
pub fn cpu_seconds() -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    let (own, _) = process_cpu_seconds(std::process::id());
    let all = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<f64> = all
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    let busy: f64 = cpu
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    (own, busy / ticks)
}

/// CPU seconds (user + system) of one process, and of its children it has waited for.
fn process_cpu_seconds(pid: u32) -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<f64> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    let at = |i: usize| fields.get(i).copied().unwrap_or(0.0);
    // After the name: 11 utime, 12 stime, 13 cutime, 14 cstime (0-based from the state).
    ((at(11) + at(12)) / ticks, (at(13) + at(14)) / ticks)
}

/// The parent of a process, read from /proc.
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds spent so far by a PostgreSQL server: the postmaster, its live children
/// (backends, writers) and the children it has reaped. Unlike the whole machine's busy
/// time, this does not count whatever else runs on a shared machine.
pub fn server_cpu_seconds(postmaster: u32) -> f64 {
    let (own, reaped) = process_cpu_seconds(postmaster);
    let children: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| parent_pid(*pid) == Some(postmaster))
        .map(|pid| process_cpu_seconds(pid).0)
        .sum();
    own + reaped + children
}

/// CPU seconds of one process (a child this benchmark started).
pub fn child_cpu_seconds(pid: u32) -> f64 {
    process_cpu_seconds(pid).0
}

/// The form every load generator posts: five fields, urlencoded.
pub const FORM_BODY: &str =
    "name=Ada+Lovelace&email=ada%40example.com&topic=billing&message=Hello+there%2C+world&consent=yes";

/// Reads one response (headers and a Content-Length body) and returns its status.
async fn read_response(stream: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> u16 {
    buffer.clear();
    loop {
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.expect("read");
        // The server closed a keep-alive connection: one past a connection cap
        // (`FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS`: every client of a benchmark is
        // 127.0.0.1), or the server stopped.
        assert!(
            read > 0,
            "connection closed by the server before its answer"
        );
        buffer.extend_from_slice(&chunk[..read]);
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&buffer[..end]).expect("headers");
        let status: u16 = head[9..12].parse().expect("status");
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buffer.len() < end + 4 + length {
            let read = stream.read(&mut chunk).await.expect("read body");
            assert!(
                read > 0,
                "connection closed by the server in its answer's body"
            );
            buffer.extend_from_slice(&chunk[..read]);
        }
        return status;
    }
}

/// What one measurement of [`offer_spread_load`] saw, or several measurements together
/// ([`LoadResult::combined`]).
pub struct LoadResult {
    /// Accepted submissions per second.
    pub rate: f64,
    /// CPU per accepted submission, µs: this process (server and load generator), and the
    /// whole machine.
    pub cpu_process_us: f64,
    pub cpu_machine_us: f64,
    /// Request latency, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Intake's group commit during the load, when the caller scraped `/metrics` around it.
    pub batches: Option<BatchFigures>,
    /// What the figures above are worked out from, so that measurements can be combined.
    raw: RawLoad,
}

/// A measurement's totals: every request's latency (µs, sorted), the seconds it lasted, and
/// the CPU seconds spent meanwhile (this process, the whole machine).
#[derive(Default)]
struct RawLoad {
    latencies_us: Vec<u32>,
    seconds: f64,
    cpu_process_s: f64,
    cpu_machine_s: f64,
}

impl LoadResult {
    fn from_raw(raw: RawLoad) -> LoadResult {
        let count = raw.latencies_us.len().max(1) as f64;
        let percentile = |p: f64| {
            raw.latencies_us
                .get(((raw.latencies_us.len() as f64 - 1.0) * p) as usize)
                .map_or(0.0, |us| f64::from(*us) / 1000.0)
        };
        LoadResult {
            rate: raw.latencies_us.len() as f64 / raw.seconds,
            cpu_process_us: raw.cpu_process_s / count * 1e6,
            cpu_machine_us: raw.cpu_machine_s / count * 1e6,
            p50_ms: percentile(0.5),
            p99_ms: percentile(0.99),
            max_ms: percentile(1.0),
            batches: None,
            raw,
        }
    }

    /// Several measurements of one arm as one: requests and seconds added up, percentiles
    /// over every request of them all, batch figures over every batch.
    pub fn combined(parts: Vec<LoadResult>) -> LoadResult {
        let mut raw = RawLoad::default();
        let mut batches: Option<BatchTotals> = None;
        for part in parts {
            raw.latencies_us.extend(part.raw.latencies_us);
            raw.seconds += part.raw.seconds;
            raw.cpu_process_s += part.raw.cpu_process_s;
            raw.cpu_machine_s += part.raw.cpu_machine_s;
            if let Some(figures) = part.batches {
                batches = Some(batches.unwrap_or_default().plus(&figures.totals));
            }
        }
        raw.latencies_us.sort_unstable();
        let mut result = LoadResult::from_raw(raw);
        result.batches = batches.map(BatchFigures::from_totals);
        result
    }
}

/// Intake's group commit as `/metrics` counts it: totals since the process started, which
/// every server of a benchmark process shares (one recorder per process).
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchTotals {
    batches: f64,
    requests: f64,
    /// Each statement's calls and their seconds.
    count: (f64, f64),
    outbox: (f64, f64),
}

/// A server's totals now (its `/metrics` must not require a key).
pub async fn batch_totals(addr: SocketAddr) -> BatchTotals {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("scrape body");
    // Every sample line is `name{labels} value`.
    let samples: HashMap<&str, f64> = text
        .lines()
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name, value.parse().ok()?))
        })
        .collect();
    let sample = |name: &str| samples.get(name).copied().unwrap_or(0.0);
    let statement = |statement: &str| {
        let name = "hymical_intake_statement_duration_seconds";
        let labels = format!("{{statement=\"{statement}\"}}");
        (
            sample(&format!("{name}_count{labels}")),
            sample(&format!("{name}_sum{labels}")),
        )
    };
    BatchTotals {
        batches: sample("hymical_intake_batches_total"),
        requests: sample("hymical_intake_batched_requests_total"),
        count: statement("count"),
        outbox: statement("outbox"),
    }
}

/// What the batches between two scrapes were like.
#[derive(Debug, Clone, Copy)]
pub struct BatchFigures {
    /// Requests per batch.
    pub size: f64,
    /// Time per call of each statement, ms, from sending it to its answer (0 when none ran).
    pub count_ms: f64,
    pub outbox_ms: f64,
    /// The totals between the two scrapes, which the figures above are worked out from.
    totals: BatchTotals,
}

impl BatchFigures {
    fn from_totals(totals: BatchTotals) -> BatchFigures {
        let per = |total: f64, calls: f64| if calls > 0.0 { total / calls } else { 0.0 };
        BatchFigures {
            size: per(totals.requests, totals.batches),
            count_ms: 1e3 * per(totals.count.1, totals.count.0),
            outbox_ms: 1e3 * per(totals.outbox.1, totals.outbox.0),
            totals,
        }
    }
}

impl BatchTotals {
    pub fn since(&self, before: &BatchTotals) -> BatchFigures {
        BatchFigures::from_totals(self.field_by_field(before, |now, then| now - then))
    }

    fn plus(&self, other: &BatchTotals) -> BatchTotals {
        self.field_by_field(other, |one, another| one + another)
    }

    /// `op` of each total here and the same total in `other`.
    fn field_by_field(&self, other: &BatchTotals, op: impl Fn(f64, f64) -> f64) -> BatchTotals {
        BatchTotals {
            batches: op(self.batches, other.batches),
            requests: op(self.requests, other.requests),
            count: (
                op(self.count.0, other.count.0),
                op(self.count.1, other.count.1),
            ),
            outbox: (
                op(self.outbox.0, other.outbox.0),
                op(self.outbox.1, other.outbox.1),
            ),
        }
    }
}

/// The address the `n`-th of `clients` client addresses posts from (198.18.0.0/15, the
/// benchmarking range), sent as `X-Forwarded-For` to a server that trusts one proxy hop.
pub fn client_address(n: usize) -> String {
    format!("198.18.{}.{}", n / 250, 1 + n % 250)
}

/// Accepted submissions per second from `concurrency` keep-alive connections, every
/// request from one of `clients` addresses (in turn) to `paths[i % paths.len()]`, each
/// request's latency recorded.
///
/// The load generator writes raw HTTP/1.1 on each connection, so that the client costs
/// about as little CPU as pgbench's does and the comparison measures the server.
pub async fn offer_spread_load(
    addr: SocketAddr,
    concurrency: usize,
    duration: Duration,
    clients: usize,
    paths: &[String],
) -> LoadResult {
    offer_spread_load_to(&[addr], concurrency, duration, clients, paths).await
}

/// [`offer_spread_load`] against several servers (processes): connection `i` goes to
/// `addrs[i % addrs.len()]`.
pub async fn offer_spread_load_to(
    addrs: &[SocketAddr],
    concurrency: usize,
    duration: Duration,
    clients: usize,
    paths: &[String],
) -> LoadResult {
    let addr = addrs[0];
    // Requests prepared up front, so the client does no formatting while measuring.
    let requests: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..clients.max(paths.len()))
            .map(|i| {
                format!(
                    "POST {} HTTP/1.1\r\nHost: {addr}\r\nX-Forwarded-For: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{FORM_BODY}",
                    paths[i % paths.len()],
                    client_address(i % clients),
                    FORM_BODY.len()
                )
                .into_bytes()
            })
            .collect(),
    );
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for connection in 0..concurrency {
        let requests = requests.clone();
        let addr = addrs[connection % addrs.len()];
        tasks.push(tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let mut buffer = Vec::with_capacity(4096);
            let mut latencies: Vec<u32> = Vec::with_capacity(16_384);
            let mut next = connection * 7919;
            while Instant::now() < deadline {
                let request = &requests[next % requests.len()];
                next += 1;
                let sent = Instant::now();
                stream.write_all(request).await.expect("write");
                let status = read_response(&mut stream, &mut buffer).await;
                assert_eq!(status, 202, "unexpected status");
                latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("load task"));
    }
    let seconds = started.elapsed().as_secs_f64();
    let (process, machine) = cpu_seconds();
    latencies.sort_unstable();
    LoadResult::from_raw(RawLoad {
        latencies_us: latencies,
        seconds,
        cpu_process_s: process - cpu_before.0,
        cpu_machine_s: machine - cpu_before.1,
    })
}

/// A pgbench script of the worker's claim and record statements (`claim`, `record`: the
/// product's own, with or without the event tail), their binds as pgbench expressions:
/// one delivery claimed and recorded as delivered per transaction. `\gset` carries the
/// claim's id and token into the record. The fair claim may find nothing for a client
/// (another holds the endpoint it was handed), so its answer is folded into one row, empty
/// then, and the record of nothing changes nothing; only deliveries recorded count.
pub fn claim_and_record(claim: &db::statement::SqlText, record: &db::statement::SqlText) -> String {
    let claim_binds = ["NULL::timestamptz", "interval '60 seconds'", "1", "8"];
    // The record statement takes a batch; pgbench records one delivery per transaction.
    let record_binds = [
        "ARRAY[:claim_token]",
        "ARRAY[:id]",
        "ARRAY['att_' || md5(random()::text)]",
        "ARRAY['http://receiver/hook']",
        "ARRAY[now()]",
        "ARRAY['succeeded']",
        "ARRAY[200]",
        "ARRAY[NULL::varchar]",
        "ARRAY[1]",
        "ARRAY['delivered']",
        "ARRAY[NULL::interval]",
        "NULL::timestamptz",
        // $13: no SMTP reply (a webhook's attempt).
        "ARRAY[NULL::varchar]",
    ];
    let claim = claim.render(&claim_binds);
    let claim = claim
        .trim_end()
        .strip_suffix("SELECT * FROM result")
        .expect("the claim answers with its result")
        .to_string()
        + "SELECT coalesce((SELECT id FROM result), '') AS id, coalesce((SELECT claim_token FROM result), '') AS claim_token";
    format!("{claim}\n\\gset\n{};\n", record.render(&record_binds))
}

/// Waits until a server process answers `/ready` with 200 (at most 60 s).
pub async fn wait_ready(addr: SocketAddr) {
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/ready");
    for _ in 0..1200 {
        if client
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{addr} never became ready");
}
