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
//! delivery, spread over the last 180 days and so over the monthly partitions of the
//! attempts and events), vacuums and analyses, and measures the same three again; and
//! prints how the rows lie in the partitions. Seeding 10 million takes a while on a small machine (18 minutes
//! on 2 cores, about 20 in all) and some 15 GB of disk; `BENCH_HISTORY=1000000` is a
//! quick run.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use hymical_forms::testing::config::{Config, Secret};
use hymical_forms::testing::db;

mod common;
use common::{env_number, offer_spread_load, BenchCluster};

const ENDPOINTS: usize = 100;
const CLIENTS: usize = 1000;
const QUEUED: u64 = 3000;

struct Figures {
    intake: f64,
    claim: f64,
    page_p50: f64,
    page_p99: f64,
}

fn main() {
    let history = env_number("BENCH_HISTORY", 10_000_000);
    let seconds = env_number("BENCH_SECONDS", 8);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = BenchCluster::start_with(&runtime, true);
    let url = cluster.url.clone();
    runtime.block_on(async {
        let mut conn = connect(&url).await;
        conn.batch_execute(
            "INSERT INTO endpoints (id, name, webhook_url, webhook_secret)
                 SELECT 'bench-' || lpad(e::text, 3, '0'), 'Bench ' || e, 'https://hooks.example.com/' || e, 'whsec_' || repeat('ab', 32)
                 FROM generate_series(0, 99) AS e;
             INSERT INTO endpoints (id, name, webhook_url, webhook_secret)
                 VALUES ('hot', 'Hot', 'https://hooks.example.com/hot', 'whsec_' || repeat('ab', 32));
             -- Each endpoint's webhook as its first destination, as the API makes it
             -- (intake queues a delivery per destination; the claim takes the queue's
             -- deliveries, which have none, for this one).
             INSERT INTO destinations (id, endpoint_id, kind, position, url, secret)
                 SELECT 'dst_' || md5(id), id, 'webhook', 1, webhook_url, webhook_secret
                 FROM endpoints;",
        )
        .await
        .expect("endpoints");
    });
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

    let measure = |label: &str| -> Figures {
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
        // What intake queued is not the claim measurement's: it is delivered at once.
        runtime.block_on(async {
            connect(&url)
                .await
                .batch_execute(&format!(
                    "UPDATE webhook_deliveries SET state = 'delivered', attempts = 1, cycle_attempts = 1, completed_at = now() WHERE state = 'pending';
                     WITH queued AS (
                         INSERT INTO submissions (id, endpoint_id, received_at, fields)
                         SELECT 'sub_' || md5(random()::text || n), 'bench-' || lpad((n % 100)::text, 3, '0'), now(), '{{\"a\":[\"1\"]}}'::json
                         FROM generate_series(1, {QUEUED}) AS n
                         RETURNING id, endpoint_id)
                     INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at)
                         SELECT 'whd_' || md5(random()::text || id), id, endpoint_id, 'https://hooks.example.com/q', 'whsec_' || repeat('ab', 32), 'pending', 0, 0, now(), now()
                         FROM queued;"
                ))
                .await
                .expect("queue");
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
                (QUEUED / 16).to_string(),
            ],
        );
        let elapsed = started.elapsed().as_secs_f64();
        let recorded = runtime.block_on(count(&url, recent)) - recorded_before;
        let claim = recorded as f64 / elapsed;
        let (page_p50, page_p99) = runtime.block_on(failed_page(addr, &key));
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

    let empty = measure("empty tables");
    let seeding = Instant::now();
    runtime.block_on(seed(&url, history));
    println!(
        "seeded {history} delivered deliveries with their submissions, attempts and events in {:.0} s",
        seeding.elapsed().as_secs_f64()
    );
    runtime.block_on(print_partitions(&url));
    let full = measure(&format!("with {history} in the history"));
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
/// submission, one attempt and three events (created, claimed, attempt recorded), spread
/// evenly over the last 180 days, so over the partitions of seven months. Triggers are off while seeding; the counts are filled in after, as
/// the migration that added them does.
async fn seed(url: &Secret, total: u64) {
    let mut conn = connect(url).await;
    // The partitions of the six months the history spans, as the product makes them
    // (monthly, as for events kept longer than 31 days); the days already made stay.
    conn.batch_execute(
        "SELECT history_make_partitions('delivery_events', 'month', now() - interval '181 days', now());
         SELECT history_make_partitions('delivery_attempts', 'month', now() - interval '181 days', now());",
    )
    .await
    .expect("partitions");
    // In slices, so no single statement holds a transaction of tens of millions of rows.
    let slice = 1_000_000u64;
    let mut from = 1u64;
    while from <= total {
        let to = (from + slice - 1).min(total);
        conn.batch_execute(&format!(
            "SET session_replication_role = replica;
             INSERT INTO submissions (id, endpoint_id, received_at, fields)
                 SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'bench-' || lpad((n % 100)::text, 3, '0'),
                        now() - interval '180 days' + n * (interval '180 days' / {total}),
                        json_build_object('email', json_build_array('user' || n || '@example.com'), 'message', json_build_array('hello'))
                 FROM generate_series({from}, {to}) AS n;
             INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at, completed_at)
                 SELECT 'whd_' || lpad(to_hex(n), 32, '0'), 'sub_' || lpad(to_hex(n), 32, '0'), 'bench-' || lpad((n % 100)::text, 3, '0'),
                        'https://hooks.example.com/' || (n % 100), 'whsec_' || repeat('ab', 32),
                        CASE WHEN n % 200 = 0 THEN 'failed' ELSE 'delivered' END, 1, 1,
                        now() - interval '180 days' + n * (interval '180 days' / {total}),
                        now() - interval '180 days' + n * (interval '180 days' / {total}),
                        now() - interval '180 days' + n * (interval '180 days' / {total}) + interval '1 second'
                 FROM generate_series({from}, {to}) AS n;
             INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at, outcome, response_status, duration_ms)
                 SELECT 'att_' || lpad(to_hex(n), 32, '0'), 'whd_' || lpad(to_hex(n), 32, '0'), 'sub_' || lpad(to_hex(n), 32, '0'), 1,
                        'https://hooks.example.com/' || (n % 100), now() - interval '180 days' + n * (interval '180 days' / {total}),
                        CASE WHEN n % 200 = 0 THEN 'http_error' ELSE 'succeeded' END, CASE WHEN n % 200 = 0 THEN 503 ELSE 200 END, 12
                 FROM generate_series({from}, {to}) AS n;
             INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state, attempts, cycle_attempts, outcome, occurred_at)
                 SELECT 'whd_' || lpad(to_hex(n), 32, '0'), 'bench-' || lpad((n % 100)::text, 3, '0'), e.kind, e.state, e.previous, e.attempts, e.attempts, e.outcome,
                        now() - interval '180 days' + n * (interval '180 days' / {total})
                 FROM generate_series({from}, {to}) AS n,
                      LATERAL (VALUES ('created', 'pending', NULL, 0, NULL),
                                      ('claimed', 'processing', 'pending', 0, NULL),
                                      ('attempt_recorded', CASE WHEN n % 200 = 0 THEN 'failed' ELSE 'delivered' END, 'processing', 1,
                                       CASE WHEN n % 200 = 0 THEN 'http_error' ELSE 'succeeded' END))
                          AS e (kind, state, previous, attempts, outcome);
             SET session_replication_role = DEFAULT;"
        ))
        .await
        .expect("seed");
        from = to + 1;
    }
    conn.batch_execute(
        // The seeded ids are the ones with twenty leading zeros (to_hex of at most 16
        // digits, padded); the triggers counted every other row already.
        "INSERT INTO delivery_state_counts AS c (endpoint_id, state, shard, deliveries)
             SELECT endpoint_id, state, 0, count(*) FROM webhook_deliveries
             WHERE id LIKE 'whd_00000000000000000000%' AND state IN ('delivered', 'failed')
             GROUP BY endpoint_id, state
         ON CONFLICT (endpoint_id, state, shard) DO UPDATE SET deliveries = c.deliveries + excluded.deliveries;",
    )
    .await
    .expect("counts");
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

/// 200 sequential failed-deliveries pages after 10 to warm up: (p50, p99) in ms.
async fn failed_page(addr: SocketAddr, key: &str) -> (f64, f64) {
    let client = reqwest::Client::new();
    let query = "{ deliveries(filter: {state: FAILED}, first: 50) { edges { node { id state completedAt } } pageInfo { endCursor } } }";
    let mut timings = Vec::new();
    for round in 0..210 {
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
        if round >= 10 {
            timings.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    timings.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| timings[((p / 100.0) * (timings.len() as f64 - 1.0)).round() as usize];
    (at(50.0), at(99.0))
}
