//! Searching 10 million submissions: the selective searches an operator and a person's
//! data lookup make, against the plain newest-first page of one endpoint in the same run
//! on the same cluster (the baseline: a listing the product has always served).
//!
//! `cargo bench --bench search` starts a throwaway cluster with PostgreSQL's durable
//! defaults and loads `BENCH_SUBMISSIONS` (10,000,000) submissions over 1,000 endpoints in
//! one set-based insert (the search index dropped while loading and built after, as
//! migration 48 builds it on an existing installation, then VACUUM ANALYZE). Each
//! submission has a name, an email address shared by three submissions (a person who
//! wrote three times, on different endpoints) and a message of five words from a
//! vocabulary of 50,000 (so a word is in about a thousand submissions of 10 million).
//! Then, through the GraphQL API on loopback, `BENCH_SAMPLES` (200) sequential requests
//! of each, after 10 to warm up, p50 and p99:
//!
//! - baseline: `submissions(filter: {endpointId}, first: 50)`;
//! - a word: `submissions(filter: {search: "w12345"}, first: 50)` (a different word
//!   each request), across every endpoint;
//! - two words of one message: `search: "w1 w2"`;
//! - a word on one endpoint: `{endpointId, search}`;
//! - a person: `submissions(filter: {value: "person123@example.com", folder: ALL})`, the
//!   lookup behind one person's data;
//! - the same word and person searches made with a project's key: the endpoints are in
//!   10 projects of 100 each, and a project's key sees one (its searches carry the
//!   project's endpoints as a filter: `endpoint_id IN (SELECT id FROM endpoints WHERE
//!   project_id = …)`).
//!
//! Loading 10 million takes a few minutes and some 6 GB of disk. Settings (in brackets
//! the smoke configuration's, `cargo test --bench search`): `BENCH_SUBMISSIONS`
//! (10000000 [20000]), `BENCH_SAMPLES` (200 [10]). The run fails when a search finds
//! nothing: its data no longer has the shape the searches expect.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Instant;

use diesel_async::SimpleAsyncConnection;
use hymical_forms::testing::config::{Config, Secret};
use hymical_forms::testing::db;

mod common;
use common::{require, setting, BenchCluster};

const ENDPOINTS: u64 = 1000;
const VOCABULARY: u64 = 50_000;

/// A measurement's filter, for its `n`th request.
type Filter = Box<dyn Fn(u64) -> serde_json::Value>;

const PAGE: &str = "query($filter: SubmissionFilter) { submissions(filter: $filter, first: 50) { nodes { id receivedAt } } }";

fn main() {
    common::announce("search");
    let submissions = setting("BENCH_SUBMISSIONS", 10_000_000, 20_000);
    let samples = setting("BENCH_SAMPLES", 200, 10) as usize;
    let runtime = common::runtime();
    let cluster = BenchCluster::start_with(&runtime, true);
    let url = cluster.url.clone();
    let started = Instant::now();
    runtime.block_on(load(&url, submissions));
    println!(
        "loaded {submissions} submissions and built the search index in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let (addr, key) = runtime.block_on(start_server(&url));
    let project_key = runtime.block_on(project_key(&url));
    let people = (submissions / 3).max(1);
    let measures: [(&str, Filter); 7] = [
        (
            "baseline: one endpoint's newest 50",
            Box::new(|n| serde_json::json!({ "endpointId": format!("e{:04}", n % ENDPOINTS) })),
        ),
        (
            "a word, every endpoint",
            Box::new(|n| serde_json::json!({ "search": format!("w{}", (n * 7919) % VOCABULARY) })),
        ),
        (
            "two words of one message",
            Box::new(move |n| {
                let (first, second) = words_of((n * 7919) % submissions);
                serde_json::json!({ "search": format!("w{first} w{second}") })
            }),
        ),
        (
            "a word on one endpoint",
            Box::new(move |n| {
                // A word of one of the endpoint's submissions.
                let submission = (n * 7919) % submissions;
                serde_json::json!({
                    "endpointId": format!("e{:04}", submission % ENDPOINTS),
                    "search": format!("w{}", words_of(submission).0),
                })
            }),
        ),
        (
            "a person's submissions by address",
            Box::new(move |n| {
                serde_json::json!({
                    "value": format!("person{}@example.com", (n * 7919) % people),
                    "folder": "ALL",
                })
            }),
        ),
        (
            "project key: a word in its project",
            // A word of a submission of the project's endpoints (e0000, e0010, …).
            Box::new(move |n| {
                let submission = ((n * 7919) % (submissions / 10).max(1)) * 10;
                serde_json::json!({ "search": format!("w{}", words_of(submission).0) })
            }),
        ),
        (
            "project key: a person in its project",
            Box::new(move |n| {
                // A person with a submission on one of the project's endpoints.
                let submission = ((n * 7919) % (submissions / 10).max(1)) * 10;
                serde_json::json!({
                    "value": format!("person{}@example.com", submission % people),
                    "folder": "ALL",
                })
            }),
        ),
    ];
    let mut baseline = None;
    for (label, filter) in &measures {
        let key = match label.starts_with("project key") {
            true => &project_key,
            false => &key,
        };
        let (p50, p99, found) = runtime.block_on(sample(addr, key, samples, filter));
        require(found > 0, label);
        let base = *baseline.get_or_insert(p99);
        println!(
            "{label:<38} p50 {p50:>7.2} ms  p99 {p99:>7.2} ms  ({:.2}x the baseline's p99)  {:.1} found a request",
            p99 / base,
            found as f64 / samples as f64
        );
    }
}

/// The two first words of submission `n`'s message (as `load` writes them).
fn words_of(n: u64) -> (u64, u64) {
    ((n * 31) % VOCABULARY, (n * 17 + 1) % VOCABULARY)
}

/// `count` submissions over the endpoints e0000…e0999, the search index dropped while
/// they go in and built after.
async fn load(url: &Secret, count: u64) {
    let mut conn = db::connect_one(url).await.expect("connect");
    let endpoints: Vec<String> = (0..ENDPOINTS)
        .map(|e| format!("('e{e:04}', 'Endpoint {e}')"))
        .collect();
    let people = (count / 3).max(1);
    conn.batch_execute(&format!(
        "INSERT INTO projects (id, name, created_at)
         SELECT 'prj_' || lpad(p::text, 32, '0'), 'Project ' || p, now()
         FROM generate_series(1, 10) AS p;
         INSERT INTO endpoints (id, name) VALUES {endpoints};
         UPDATE endpoints SET project_id = 'prj_' || lpad((substr(id, 2)::int % 10 + 1)::text, 32, '0');
         DROP INDEX submissions_search_idx;
         SET maintenance_work_mem = '1GB';
         INSERT INTO submissions (id, endpoint_id, received_at, fields)
         SELECT 'sub_' || lpad(to_hex(n), 32, '0'),
                'e' || lpad((n % {ENDPOINTS})::text, 4, '0'),
                now() - (n % 15552000) * interval '1 second',
                json_build_object(
                    'name', json_build_array('Person ' || (n % {people})),
                    'email', json_build_array('person' || (n % {people}) || '@example.com'),
                    'message', json_build_array(
                        'w' || ((n * 31) % {VOCABULARY}) || ' w' || ((n * 17 + 1) % {VOCABULARY})
                        || ' w' || ((n * 13 + 2) % {VOCABULARY}) || ' w' || ((n * 11 + 3) % {VOCABULARY})
                        || ' w' || ((n * 7 + 4) % {VOCABULARY})))
         FROM generate_series(0, {last}) AS n;
         CREATE INDEX submissions_search_idx ON submissions
             USING gin (json_to_tsvector('simple'::regconfig, fields, '[\"string\"]'::jsonb));",
        endpoints = endpoints.join(", "),
        last = count - 1,
    ))
    .await
    .expect("load the submissions");
    // On its own: VACUUM runs in no transaction block.
    conn.batch_execute("VACUUM ANALYZE submissions")
        .await
        .expect("vacuum");
}

/// An admin key of project 1 (the endpoints e0000, e0010, …, e0990).
async fn project_key(url: &Secret) -> String {
    let mut new_key = hymical_forms::testing::auth::generate(
        "bench project",
        hymical_forms::testing::model::state::KeyRole::Admin,
        chrono::Utc::now(),
    );
    new_key.row.project_id =
        hymical_forms::testing::model::ids::ProjectId::parse(&format!("prj_{:032}", 1));
    let mut conn = db::connect_one(url).await.expect("connection");
    db::keys::insert(&mut conn, &new_key.row)
        .await
        .expect("key");
    new_key.key.expose().to_string()
}

async fn start_server(url: &Secret) -> (SocketAddr, String) {
    let config = Config::from_lookup(|name| {
        (name == "FORMS_RATE_LIMIT_ENABLED").then(|| "false".to_string())
    })
    .expect("config");
    let key = common::admin_key(url).await;
    let app = common::app_state(url, config, 8).await;
    (common::serve(app).await, key)
}

/// `samples` sequential pages with `filter(n)` after 10 to warm up: (p50, p99) in ms, and
/// how many submissions the measured pages held.
async fn sample(
    addr: SocketAddr,
    key: &str,
    samples: usize,
    filter: &dyn Fn(u64) -> serde_json::Value,
) -> (f64, f64, usize) {
    let mut times = Vec::with_capacity(samples);
    let mut found = 0;
    for n in 0..(samples + 10) as u64 {
        let variables = serde_json::json!({ "filter": filter(n) });
        let started = Instant::now();
        let data = common::graphql(addr, key, PAGE, variables).await;
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        if n >= 10 {
            times.push(elapsed);
            found += data["submissions"]["nodes"].as_array().map_or(0, Vec::len);
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];
    (at(0.5), at(0.99), found)
}
