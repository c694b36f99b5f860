//! Intake throughput against the PostgreSQL ceiling, measured in one run.
//!
//! `cargo bench --bench intake` starts a throwaway PostgreSQL cluster, serves the intake
//! route on loopback, and offers load from many concurrent keep-alive connections
//! (urlencoded, 5 fields, webhook configured so every submission also writes a delivery).
//! In the same run `pgbench` executes the product's own outbox statement
//! (`src/db/sql/outbox_insert.sql`, binds as pgbench expressions) at the same concurrency
//! against the same cluster: the ceiling on this machine. It also runs the obvious design
//! (three inserts in a transaction) for comparison. Rounds alternate so that drift in the shared machine affects all equally.
//!
//! Settings: `BENCH_CONCURRENCY` (32), `BENCH_SECONDS` per measurement (8), `BENCH_ROUNDS` (3).

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use hymical_forms::testing::config::{Config, Secret};
use hymical_forms::testing::db;

mod common;
use common::{env_number, offer_load, BenchCluster};

fn main() {
    let concurrency = env_number("BENCH_CONCURRENCY", 32) as usize;
    let seconds = env_number("BENCH_SECONDS", 8);
    let rounds = env_number("BENCH_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let cluster = BenchCluster::start(&runtime);
    let url = cluster.url.clone();
    runtime.block_on(async {
        let mut conn = db::connect_one(&url).await.expect("connect");
        db::endpoints::insert(
            &mut conn,
            &db::models::EndpointRow {
                id: hymical_forms::testing::model::ids::EndpointId::parse("bench")
                    .expect("endpoint id"),
                name: "Benchmark".into(),
                is_active: true,
                created_at: chrono::Utc::now(),
                webhook_url: Some("https://receiver.example/hook".into()),
                webhook_secret: Some(format!("whsec_{}", "ab".repeat(32))),
                redirect_url: None,
                allowed_origins: Vec::new(),
                honeypot_field: None,
            },
        )
        .await
        .expect("endpoint");
    });

    // The ceiling: the product's own outbox statement (src/db/sql/outbox_insert.sql with
    // the event tail), its binds supplied as pgbench expressions; one round trip, as
    // intake sends it.
    let id = |prefix: &str| format!("'{prefix}' || lpad(to_hex(:n::bigint), 32, '0')");
    let fields = r#"'{"name":["Ada Lovelace"],"email":["ada@example.com"],"topic":["billing"],"message":["Hello there, world"],"consent":["yes"]}'::json"#;
    let (submission, delivery) = (id("sub_"), id("whd_"));
    let binds = [
        submission.as_str(),
        "'bench'",
        "now()",
        fields,
        "NULL::varchar",
        "NULL::varchar",
        delivery.as_str(),
        "NULL::timestamptz",
    ];
    let random_n = "\\set n random(1, 9223372036854775807)\n";
    let script = cluster.script(
        "outbox.sql",
        &format!(
            "{random_n}{};\n",
            db::submissions::OUTBOX_INSERT.render(&binds)
        ),
    );
    // The same statement without the event tail, to show what writing the change feed
    // costs the database.
    let script_without_events = cluster.script(
        "outbox_without_events.sql",
        &format!(
            "{random_n}{};\n",
            db::statement::SqlText::new(concat!(
                include_str!("../src/db/sql/outbox_insert.sql"),
                "SELECT * FROM result"
            ))
            .render(&binds)
        ),
    );
    // The obvious design, for comparison: the same rows written by three statements in a
    // transaction (five round trips).
    let script_obvious = cluster.script(
        "outbox_obvious.sql",
        &format!(
            r#"{random_n}BEGIN;
INSERT INTO submissions (id, endpoint_id, received_at, fields) VALUES ({submission}, 'bench', now(), {fields});
INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at) VALUES ({delivery}, {submission}, 'bench', 'https://receiver.example/hook', 'whsec_abababababababababababababababababababababababababababababababab', 'pending', 0, 0, now(), now());
INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, attempts, cycle_attempts, occurred_at) VALUES ({delivery}, 'bench', 'created', 'pending', 0, 0, statement_timestamp());
COMMIT;
"#
        ),
    );

    let unlimited = [
        ("FORMS_RATE_LIMIT_IP_REQUESTS", "1000000000"),
        ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "1000000000"),
    ];
    let servers = runtime.block_on(async {
        let off = start_server(&url, concurrency, &[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
        let on = start_server(&url, concurrency, &unlimited).await;
        (off, on)
    });

    println!("concurrency {concurrency}, {seconds} s per measurement, {rounds} rounds");
    let pgbench = |script: &std::path::Path| {
        cluster.pgbench(
            script,
            &[
                "-c".into(),
                concurrency.to_string(),
                "-T".into(),
                seconds.to_string(),
            ],
        )
    };
    let mut ceiling = Vec::new();
    let mut obvious = Vec::new();
    let mut limits_off = Vec::new();
    let mut limits_on = Vec::new();
    let mut ceiling_without_events = Vec::new();
    // Warm-up: fills caches and prepared statements on every connection.
    runtime.block_on(offer_load(servers.0, concurrency, Duration::from_secs(2)));
    for round in 1..=rounds {
        let pg = pgbench(&script);
        let off = runtime.block_on(offer_load(
            servers.0,
            concurrency,
            Duration::from_secs(seconds),
        ));
        let on = runtime.block_on(offer_load(
            servers.1,
            concurrency,
            Duration::from_secs(seconds),
        ));
        let pg_obvious = pgbench(&script_obvious);
        println!(
            "round {round}: pgbench outbox statement {pg:.0} tps, three inserts in a transaction {pg_obvious:.0} tps | intake, limits off {off:.0}/s ({:.0}% of the statement, {:.0}% of the transaction) | limits on {on:.0}/s ({:.0}%, {:.0}%)",
            100.0 * off / pg,
            100.0 * off / pg_obvious,
            100.0 * on / pg,
            100.0 * on / pg_obvious,
        );
        let pg_bare = pgbench(&script_without_events);
        println!(
            "         pgbench outbox statement without the event tail {pg_bare:.0} tps: events cost the database {:.0}%",
            100.0 * (1.0 - pg / pg_bare),
        );
        ceiling.push(pg);
        obvious.push(pg_obvious);
        limits_off.push(off);
        limits_on.push(on);
        ceiling_without_events.push(pg_bare);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "mean: pgbench outbox statement {:.0} tps, transaction {:.0} tps | limits off {:.0}/s = {:.0}% of the statement, {:.0}% of the transaction | limits on {:.0}/s = {:.0}%, {:.0}%",
        mean(&ceiling),
        mean(&obvious),
        mean(&limits_off),
        100.0 * mean(&limits_off) / mean(&ceiling),
        100.0 * mean(&limits_off) / mean(&obvious),
        mean(&limits_on),
        100.0 * mean(&limits_on) / mean(&ceiling),
        100.0 * mean(&limits_on) / mean(&obvious),
    );
    println!(
        "mean pgbench without the event tail: {:.0} tps; writing events costs the database {:.0}%",
        mean(&ceiling_without_events),
        100.0 * (1.0 - mean(&ceiling) / mean(&ceiling_without_events)),
    );
}

async fn start_server(url: &Secret, pool_size: usize, vars: &[(&str, &str)]) -> SocketAddr {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config =
        Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .expect("config");
    let app = common::app_state(url, config, pool_size as u32).await;
    common::serve(app).await
}
