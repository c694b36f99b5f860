//! Flat with history: intake, claiming and the failed-deliveries page on empty tables and
//! again after `BENCH_HISTORY` delivered deliveries (10,000,000) with their submissions,
//! attempts and events have been added, in the same run on the same cluster.
//!
//! `cargo bench --bench history` starts a throwaway cluster with PostgreSQL's durable
//! defaults, creates 100 endpoints and a hot one, and measures, on the empty tables:
//!
//! - intake: accepted submissions per second, as `cargo bench --bench intake` offers them
//!   (32 connections, 1,000 client addresses, half to the hot endpoint, rate limiting on
//!   with raised limits), for `BENCH_SECONDS` (8);
//! - claiming: pgbench running the worker's own claim and record statements, one delivery
//!   per transaction, over 3,000 queued deliveries (deliveries recorded per second);
//! - the failed-deliveries page, `deliveries(filter: {state: FAILED}, first: 50)`, 200
//!   sequential requests (p50, p99).
//!
//! Then it seeds the history (0.5% of it failed; one attempt and three events per
//! delivery: created, claimed, attempt recorded), vacuums and analyses, and measures the
//! same three again; and prints how the rows lie in the partitions. The history is made
//! by the product's own functions: the endpoints by `db::endpoints::insert` (a webhook
//! each), the submissions and deliveries by intake's statement
//! (`db::submissions::insert_batch`), the attempts by the worker's claim and record
//! statements (`common::settle_queue`), so its rows, events and counts are the ones the
//! product writes. Submissions and attempts are dated over the last 180 days (the
//! attempts so over the monthly partitions); the events carry the time they were written,
//! as the product dates every event, so they lie in the current partition. Seeding 10
//! million takes a while on a small machine and some 15 GB of disk;
//! `BENCH_HISTORY=1000000` is a quicker run.
//!
//! Settings (in brackets the smoke configuration's, `cargo test --bench history`):
//! `BENCH_HISTORY` (10000000 [2000]), `BENCH_SECONDS` (8 [2]), `BENCH_QUEUED` deliveries
//! for the claim measurement (3000 [160]), `BENCH_SAMPLES` pages (200 [10]). The run fails
//! when a measurement is empty: no form accepted, no delivery claimed and recorded, no
//! failed delivery on the page after the seed.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use hymical_forms::testing::config::{Config, Secret};
use hymical_forms::testing::db;

mod common;
use common::{offer_spread_load, require, setting, BenchCluster};

const ENDPOINTS: usize = 100;
const CLIENTS: usize = 1000;

struct Figures {
    intake: f64,
    claim: f64,
    page_p50: f64,
    page_p99: f64,
}

fn main() {
    common::announce("history");
    let history = setting("BENCH_HISTORY", 10_000_000, 2_000);
    let seconds = setting("BENCH_SECONDS", 8, 2);
    let queued = setting("BENCH_QUEUED", 3000, 160).max(16);
    let samples = setting("BENCH_SAMPLES", 200, 10) as usize;
    let runtime = common::runtime();
    let cluster = BenchCluster::start_with(&runtime, true);
    let url = cluster.url.clone();
    let endpoints: Vec<(String, Option<String>)> = (0..ENDPOINTS)
        .map(|e| format!("bench-{e:03}"))
        .chain(std::iter::once("hot".to_string()))
        .map(|id| {
            let hook = format!("https://hooks.example.com/{id}");
            (id, Some(hook))
        })
        .collect();
    runtime.block_on(common::insert_endpoints(&url, &endpoints));
    let (addr, key) = runtime.block_on(start_server(&url));
    let paths: Vec<String> = (0..2 * ENDPOINTS)
        .map(|i| {
            if i % 2 == 0 {
                "/f/hot".to_string()
            } else {
                format!("/f/bench-{:03}", i / 2)
            }
        })
        .collect();
    let claim_script = claim_and_record_script(&cluster);

    let measure = |label: &str, history_seeded: bool| -> Figures {
        runtime.block_on(offer_spread_load(
            addr,
            32,
            Duration::from_secs(2),
            CLIENTS,
            &paths,
        ));
        let intake = runtime
            .block_on(offer_spread_load(
                addr,
                32,
                Duration::from_secs(seconds),
                CLIENTS,
                &paths,
            ))
            .rate;
        // What intake queued is not the claim measurement's: it is delivered at once,
        // through the worker's statements; then the claim measurement's queue, through
        // intake's.
        runtime.block_on(async {
            common::settle_queue(&url, |_| common::Fate::Delivered, |received| received).await;
            let written = common::queue_submissions(
                &url,
                queued,
                |n| format!("bench-{:03}", n % ENDPOINTS as u64),
                |_| chrono::Utc::now(),
                |_| serde_json::json!({ "a": ["1"] }),
            )
            .await;
            require(written == queued, "history: the claim measurement's queue");
        });
        // Seeded attempts are hours old; these are the ones of the last ten minutes.
        let recent = "SELECT count(*) FROM delivery_attempts WHERE attempted_at > now() - interval '10 minutes'";
        let recorded_before = runtime.block_on(count(&url, recent));
        let started = Instant::now();
        cluster.pgbench(
            &claim_script,
            &[
                "-c".into(),
                "16".into(),
                "-t".into(),
                (queued / 16).to_string(),
            ],
        );
        let elapsed = started.elapsed().as_secs_f64();
        let recorded = runtime.block_on(count(&url, recent)) - recorded_before;
        let claim = recorded as f64 / elapsed;
        require(intake > 0.0, "history: forms accepted");
        require(
            recorded > 0,
            "history: deliveries claimed and recorded by pgbench",
        );
        let (page_p50, page_p99, rows) = runtime.block_on(failed_page(addr, &key, samples));
        if std::env::var_os("BENCH_EXPLAIN").is_some() {
            runtime.block_on(async {
                use diesel_async::RunQueryDsl;
                #[derive(diesel::QueryableByName)]
                struct Line {
                    #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
                    line: String,
                }
                let lines: Vec<Line> = diesel::sql_query(
                    "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM webhook_deliveries WHERE state = 'failed' ORDER BY created_at DESC, id DESC LIMIT 51",
                )
                .load(&mut connect(&url).await)
                .await
                .expect("explain");
                for line in lines {
                    println!("    {}", line.line);
                }
            });
        }
        if history_seeded {
            require(
                rows > 0,
                "history: failed deliveries on the page after the seed",
            );
        }
        println!(
            "{label}: intake {intake:.0}/s | claim+record {claim:.0}/s | failed page p50 {page_p50:.2} ms, p99 {page_p99:.2} ms"
        );
        Figures {
            intake,
            claim,
            page_p50,
            page_p99,
        }
    };

    let empty = measure("empty tables", false);
    let seeding = Instant::now();
    // The seeding's commits need not wait for their flush.
    runtime.block_on(cluster.set_synchronous_commit(false));
    runtime.block_on(seed(&url, history));
    runtime.block_on(cluster.set_synchronous_commit(true));
    println!(
        "seeded {history} delivered deliveries with their submissions, attempts and events in {:.0} s",
        seeding.elapsed().as_secs_f64()
    );
    runtime.block_on(print_partitions(&url));
    let full = measure(&format!("with {history} in the history"), true);
    println!(
        "with history / empty: intake {:.0}%, claim+record {:.0}%, failed page p50 {:.0}%, p99 {:.0}%",
        100.0 * full.intake / empty.intake,
        100.0 * full.claim / empty.claim,
        100.0 * full.page_p50 / empty.page_p50,
        100.0 * full.page_p99 / empty.page_p99,
    );
}

async fn connect(url: &Secret) -> AsyncPgConnection {
    AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect")
}

async fn count(url: &Secret, sql: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        count: i64,
    }
    diesel::sql_query(sql)
        .get_result::<Count>(&mut connect(url).await)
        .await
        .expect("count")
        .count
}

/// The history: `total` deliveries, 0.5% failed, the rest delivered, each with its
/// submission, one attempt and three events (created, claimed, attempt recorded), the
/// submissions and attempts dated evenly over the last 180 days, so over the partitions of
/// seven months; all of it written by the product's own statements (module docs).
async fn seed(url: &Secret, total: u64) {
    use db::history::{make_partitions, HistoryTable, PartitionSpan};
    let mut conn = connect(url).await;
    // The partitions of the six months the history spans, as the product makes them
    // (monthly, as for events kept longer than 31 days); the days already made stay.
    let now = chrono::Utc::now();
    let from = now - chrono::Duration::days(181);
    for table in [HistoryTable::Events, HistoryTable::Attempts] {
        make_partitions(&mut conn, table, PartitionSpan::Month, from, now)
            .await
            .expect("partitions");
    }
    let span = chrono::Duration::days(180);
    let step = span / i32::try_from(total.max(1)).unwrap_or(i32::MAX);
    let queued = common::queue_submissions(
        url,
        total,
        |n| format!("bench-{:03}", n % ENDPOINTS as u64),
        |n| now - span + step * i32::try_from(n).unwrap_or(i32::MAX),
        |n| {
            serde_json::json!({
                "email": [format!("user{n}@example.com")],
                "message": ["hello"],
            })
        },
    )
    .await;
    require(queued == total, "history: deliveries queued by the seed");
    let attempts = common::settle_queue(
        url,
        |k| {
            if k % 200 == 199 {
                common::Fate::Failed
            } else {
                common::Fate::Delivered
            }
        },
        |received| received + chrono::Duration::seconds(1),
    )
    .await;
    require(attempts >= total, "history: attempts recorded by the seed");
    // On its own: VACUUM cannot run in the implicit transaction of a multi-statement batch.
    conn.batch_execute("VACUUM ANALYZE").await.expect("vacuum");
}

/// How the history lies in the partitions (the planner's row estimates, fresh from the
/// VACUUM ANALYZE after seeding).
async fn print_partitions(url: &Secret) {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Line {
        #[diesel(sql_type = diesel::sql_types::Text)]
        line: String,
    }
    let lines: Vec<Line> = diesel::sql_query(
        "SELECT p.partition::text || ': ' || c.reltuples::bigint AS line
         FROM (SELECT * FROM history_partitions('delivery_events')
               UNION ALL SELECT * FROM history_partitions('delivery_attempts')) p
         JOIN pg_class c ON c.oid = p.partition
         WHERE c.reltuples > 0
         ORDER BY 1",
    )
    .load(&mut connect(url).await)
    .await
    .expect("partitions");
    for line in lines {
        println!("    {}", line.line);
    }
}

async fn start_server(url: &Secret) -> (SocketAddr, String) {
    let vars = [
        ("FORMS_RATE_LIMIT_IP_REQUESTS", "1000000000"),
        ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "1000000000"),
        ("FORMS_TRUSTED_PROXY_HOPS", "1"),
    ];
    let config = Config::from_lookup(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    })
    .expect("config");
    let key = common::admin_key(url).await;
    let app = common::app_state(url, config, 32).await;
    (common::serve(app).await, key)
}

/// The worker's claim and record statements, one delivery per transaction.
fn claim_and_record_script(cluster: &BenchCluster) -> std::path::PathBuf {
    cluster.script(
        "history_claim_and_record.sql",
        &common::claim_and_record(&db::queue::CLAIM, &db::queue::RECORD_ATTEMPTS),
    )
}

/// `samples` sequential failed-deliveries pages after 10 to warm up: (p50, p99) in ms, and
/// the rows of the last page.
async fn failed_page(addr: SocketAddr, key: &str, samples: usize) -> (f64, f64, usize) {
    let client = reqwest::Client::new();
    let query = "{ deliveries(filter: {state: FAILED}, first: 50) { edges { node { id state completedAt } } pageInfo { endCursor } } }";
    let mut timings = Vec::new();
    let mut rows = 0;
    for round in 0..samples + 10 {
        let started = Instant::now();
        let body: serde_json::Value = client
            .post(format!("http://{addr}/graphql"))
            .header("authorization", format!("Bearer {key}"))
            .json(&serde_json::json!({ "query": query }))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        assert!(body.get("errors").is_none(), "{body}");
        rows = body["data"]["deliveries"]["edges"]
            .as_array()
            .map_or(0, Vec::len);
        if round >= 10 {
            timings.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    timings.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| timings[((p / 100.0) * (timings.len() as f64 - 1.0)).round() as usize];
    (at(50.0), at(99.0), rows)
}
