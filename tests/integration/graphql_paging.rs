//! Pagination, batching (constant query counts), query limits, and replay numbering.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::{ManualClock, SystemClock};
use serde_json::{json, Value};

use support::harness::{TestApp, TestDb};
use support::receiver::Receiver;

fn code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or("<none>")
}

/// `count` deliveries (with submissions) for one endpoint, many sharing a timestamp, and
/// `attempts` attempt rows each.
async fn seed(db: &TestDb, count: usize, attempts: usize) {
    use diesel_async::SimpleAsyncConnection;
    let mut conn = db.connect().await;
    conn.batch_execute(&format!(
        "INSERT INTO endpoints (id, name, webhook_url, webhook_secret) VALUES ('paged', 'Paged', 'https://a.example/h', 'whsec_' || repeat('ab', 32));
         INSERT INTO submissions (id, endpoint_id, received_at, fields)
             SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'paged', timestamptz '2026-11-01T00:00:00Z' + (n / 7) * interval '1 second', '{{\"n\":[\"x\"]}}'
             FROM generate_series(1, {count}) AS n;
         INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at, completed_at)
             SELECT 'whd_' || lpad(to_hex(n), 32, '0'), 'sub_' || lpad(to_hex(n), 32, '0'), 'paged', 'https://a.example/h', 'whsec_' || repeat('ab', 32),
                    'delivered', {attempts}, {attempts}, now(), timestamptz '2026-11-01T00:00:00Z' + (n / 7) * interval '1 second', now()
             FROM generate_series(1, {count}) AS n;
         INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at, outcome, response_status, duration_ms)
             SELECT 'att_' || lpad(to_hex(n * 100 + a), 32, '0'), 'whd_' || lpad(to_hex(n), 32, '0'), 'sub_' || lpad(to_hex(n), 32, '0'), a,
                    'https://a.example/h', now(), CASE WHEN a = {attempts} THEN 'succeeded' ELSE 'http_error' END, CASE WHEN a = {attempts} THEN 200 ELSE 503 END, 5
             FROM generate_series(1, {count}) AS n, generate_series(1, {attempts}) AS a;"
    ))
    .await
    .expect("seed");
}

#[derive(diesel::QueryableByName)]
struct Id {
    #[diesel(sql_type = diesel::sql_types::Text)]
    id: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn walking_every_page_returns_each_row_once_in_order() {
    let db = TestDb::new().await;
    seed(&db, 1000, 0).await;
    let app = TestApp::start_on(db, &[], Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("pager").await;
    let mut conn = app.db.connect().await;
    let expected: Vec<String> =
        diesel::sql_query("SELECT id FROM webhook_deliveries ORDER BY created_at DESC, id DESC")
            .load::<Id>(&mut conn)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
    for (query, connection) in [
        ("query($after: String) { deliveries(first: 100, after: $after) { edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage endCursor } } }", "deliveries"),
        ("query($after: String) { submissions(first: 100, after: $after) { edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage endCursor } } }", "submissions"),
    ] {
        let mut seen = Vec::new();
        let mut after = Value::Null;
        let mut pages = 0;
        loop {
            let body = app.gql(&key, query, json!({"after": after})).await;
            let page = &body["data"][connection];
            let edges = page["edges"].as_array().unwrap_or_else(|| panic!("{}", body.to_string()));
            seen.extend(edges.iter().map(|e| e["node"]["id"].as_str().unwrap().to_string()));
            assert_eq!(page["pageInfo"]["hasPreviousPage"], pages > 0);
            pages += 1;
            if page["pageInfo"]["hasNextPage"] == false {
                break;
            }
            after = page["pageInfo"]["endCursor"].clone();
        }
        assert_eq!(pages, 10);
        let expected: Vec<String> = if connection == "deliveries" {
            expected.clone()
        } else {
            expected.iter().map(|id| id.replace("whd_", "sub_")).collect()
        };
        assert_eq!(seen, expected, "{connection}: every row once, newest first");
        assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 1000);
    }

    // The endpoint's nested connection pages the same way.
    let body = app
        .gql(
            &key,
            "{ endpoint(id: \"paged\") { deliveries(first: 3) { edges { node { id } } } } }",
            json!({}),
        )
        .await;
    let nested: Vec<&str> = body["data"]["endpoint"]["deliveries"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        nested,
        expected[..3].iter().map(String::as_str).collect::<Vec<_>>()
    );

    let body = app
        .gql(
            &key,
            "{ deliveries(first: 101) { edges { node { id } } } }",
            json!({}),
        )
        .await;
    assert_eq!(code(&body), "PAGE_SIZE_TOO_LARGE");
    assert_eq!(
        body["errors"][0]["extensions"]["details"],
        json!({"limit": 100, "requested": 101})
    );
    for cursor in [
        "bm90IGEgY3Vyc29y",
        "%%%",
        "djE6MTc2NDAwMDAwMDAwMDAwMDp3aGRfeDpkZWFkYmVlZg",
    ] {
        let body = app.gql(&key, "query($after: String) { deliveries(first: 5, after: $after) { edges { node { id } } } }", json!({"after": cursor})).await;
        assert_eq!(code(&body), "INVALID_CURSOR", "{cursor}");
    }
    let body = app.gql(&key, "{ deliveries(filter: {createdAfter: \"2026-11-02T00:00:00Z\", createdBefore: \"2026-11-01T00:00:00Z\"}) { edges { node { id } } } }", json!({})).await;
    assert_eq!(code(&body), "INVALID_TIME_RANGE");
    let body = app.gql(&key, "{ deliveries(filter: {state: FAILED}, first: 5) { edges { node { id } } } deliveryCounts(endpointId: \"paged\") { pending processing delivered failed } }", json!({})).await;
    assert_eq!(body["data"]["deliveries"]["edges"], json!([]));
    assert_eq!(
        body["data"]["deliveryCounts"],
        json!({"pending": 0, "processing": 0, "delivered": 1000, "failed": 0})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_100_with_nested_objects_costs_a_constant_number_of_statements() {
    let db = TestDb::new().await;
    seed(&db, 150, 3).await;
    let (app, counter) = TestApp::start_logged(db, &[]).await;
    let (_, key) = app.create_key("counter").await;
    let query = "{ deliveries(first: 100) { edges { node { id state endpoint { id name } submission { id fieldCount fields { name values } delivery { id } endpoint { id } } attemptHistory { number outcome httpStatus late } } } } }";
    // Warm the pool so that connection set-up is not counted.
    app.gql(&key, query, json!({})).await;
    counter.reset();
    let body = app.gql(&key, query, json!({})).await;
    let statements = counter.statements();
    let edges = body["data"]["deliveries"]["edges"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", body.to_string()));
    assert_eq!(edges.len(), 100);
    assert_eq!(
        edges[0]["node"]["attemptHistory"].as_array().unwrap().len(),
        3
    );
    assert_eq!(
        edges[0]["node"]["submission"]["delivery"]["id"],
        edges[0]["node"]["id"]
    );
    // Key lookup (and at most once a minute its last use), page, endpoints, submissions,
    // deliveries by submission, attempts.
    assert!(statements <= 7, "{statements} statements for one page");
}

/// Every page after the first is the same prepared statement with other binds: walking
/// many pages prepares each listing's statements once per pooled connection, and the
/// keyset condition is among what is prepared (a query Diesel deems unsafe to cache would
/// never be, and PostgreSQL would parse and plan it again for every page).
#[tokio::test(flavor = "multi_thread")]
async fn later_pages_reuse_prepared_statements() {
    let db = TestDb::new().await;
    seed(&db, 300, 0).await;
    let (app, counter) = TestApp::start_logged(db, &[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    let (_, key) = app.create_key("pager").await;
    counter.reset();
    let mut walked = 0;
    for listing in ["deliveries", "submissions"] {
        let mut after = Value::Null;
        let mut pages = 0;
        loop {
            let body = app
                .gql(
                    &key,
                    &format!(
                        "query($after: String) {{ {listing}(first: 10, after: $after) {{ edges {{ node {{ id }} }} pageInfo {{ hasNextPage endCursor }} }} }}"
                    ),
                    json!({ "after": after }),
                )
                .await;
            let page = &body["data"][listing];
            assert_eq!(page["edges"].as_array().map(Vec::len), Some(10), "{body}");
            pages += 1;
            if page["pageInfo"]["hasNextPage"] != true {
                break;
            }
            after = page["pageInfo"]["endCursor"].clone();
        }
        assert_eq!(pages, 30);
        walked += pages;
    }
    let prepared = counter.prepared();
    // The pool has 4 connections; each prepares a statement at most once.
    let mut per_statement = std::collections::HashMap::<&str, usize>::new();
    for sql in &prepared {
        *per_statement.entry(sql.as_str()).or_default() += 1;
    }
    for (sql, times) in &per_statement {
        assert!(
            *times <= 4,
            "prepared {times} times over {walked} pages: {sql}"
        );
    }
    for table in ["webhook_deliveries", "submissions"] {
        assert!(
            per_statement.keys().any(|sql| sql.contains(&format!(
                "(\"{table}\".\"created_at\", \"{table}\".\"id\") < ("
            )) || sql.contains(&format!(
                "(\"{table}\".\"received_at\", \"{table}\".\"id\") < ("
            ))),
            "no prepared page-after-cursor statement on {table}: {per_statement:#?}"
        );
    }
    assert!(
        prepared.len() < walked,
        "{} prepares for {walked} pages",
        prepared.len()
    );
}

/// `body` is a refusal before execution: no data, `QUERY_TOO_COMPLEX`, and a message
/// that names the `setting` to raise.
fn assert_too_complex(body: &Value, setting: &str) {
    assert!(body.get("data").is_none(), "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
        "{body}"
    );
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains(setting),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn depth_and_complexity_bombs_are_refused_before_execution() {
    let (app, counter) = TestApp::start_logged(TestDb::new().await, &[]).await;
    let (_, key) = app.create_key("bomb").await;
    let mut deep = String::from("id");
    // 17 levels: deeper than the limit of 12, well inside the parser's own limit.
    for _ in 0..3 {
        deep = format!("endpoint {{ deliveries(first: 1) {{ edges {{ node {{ {deep} }} }} }} }}");
    }
    let deep = format!("{{ deliveries(first: 1) {{ edges {{ node {{ {deep} }} }} }} }}");
    app.gql(&key, "{ version }", json!({})).await;
    counter.reset();
    let body = app.gql(&key, &deep, json!({})).await;
    assert_too_complex(&body, "FORMS_GRAPHQL_MAX_DEPTH");
    // Five pages of a hundred: each row's fields count once per row it may hold.
    let wide = format!(
        "{{ {} }}",
        (0..5)
            .map(|i| format!("a{i}: deliveries(first: 100) {{ edges {{ node {{ id state attempts cycleAttempts createdAt completedAt nextAttemptAt destinationUrl claimExpiresAt }} }} }}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let body = app.gql(&key, &wide, json!({})).await;
    assert_too_complex(&body, "FORMS_GRAPHQL_MAX_COMPLEXITY");
    // Only the key checks touched the database.
    assert!(counter.statements() <= 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_continues_the_numbering_with_a_fresh_schedule() {
    let receiver = Receiver::start().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = TestApp::start_with(
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ],
        clock.clone(),
    )
    .await;
    let (_, key) = app.create_key("ops").await;
    app.webhook_endpoint("contact", &receiver.url("/status/503"))
        .await;
    app.submit("contact", "a=1").await;
    let worker = app.worker(None);
    let drive_cycle = |expected_waits: [i64; 4]| {
        let (app, clock, worker) = (&app, clock.clone(), worker.clone());
        async move {
            for wait in expected_waits.into_iter().map(Some).chain([None]) {
                assert_eq!(worker.run_once().await.unwrap(), 1);
                let delivery = &app.db.deliveries().await[0];
                if let Some(wait) = wait {
                    assert_eq!(
                        (delivery.next_attempt_at - clock_now(&clock)).num_seconds(),
                        wait
                    );
                    clock.set(delivery.next_attempt_at);
                }
            }
        }
    };
    drive_cycle([10, 20, 40, 80]).await;
    let id = app.db.deliveries().await[0].id.clone();
    assert_eq!(app.db.delivery(&id).await.state, "failed");
    let body = app.gql(&key, "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state attempts cycleAttempts } } }", json!({"id": id})).await;
    assert_eq!(
        body["data"]["replayDelivery"]["delivery"],
        json!({"state": "PENDING", "attempts": 5, "cycleAttempts": 0})
    );
    drive_cycle([10, 20, 40, 80]).await;
    let numbers: Vec<i32> = app
        .db
        .attempts(&id)
        .await
        .iter()
        .map(|a| a.attempt_number)
        .collect();
    assert_eq!(numbers, (1..=10).collect::<Vec<_>>());
    let delivery = app.db.delivery(&id).await;
    assert_eq!(delivery.progress(), ("failed", 10, 5));
    let body = app
        .gql(
            &key,
            "query($id: ID!) { delivery(id: $id) { attemptHistory { number } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(
        body["data"]["delivery"]["attemptHistory"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
}

fn clock_now(clock: &ManualClock) -> chrono::DateTime<Utc> {
    use hymical_forms::testing::clock::Clock;
    clock.now()
}

#[tokio::test(flavor = "multi_thread")]
async fn delivery_counts_follow_every_transition() {
    let app = TestApp::start_without_rate_limit().await;
    let (_, key) = app.create_key("counts").await;
    app.webhook_endpoint("one", "https://a.example/h").await;
    app.webhook_endpoint("two", "https://a.example/h").await;
    for endpoint in ["one", "one", "one", "two"] {
        app.submit(endpoint, "a=1").await;
    }
    let ids = app.db.delivery_ids().await;
    let counts = |endpoint: Option<&'static str>| {
        let (app, key) = (&app, &key);
        async move {
            let query = match endpoint {
                Some(id) => format!("{{ deliveryCounts(endpointId: \"{id}\") {{ pending processing delivered failed }} }}"),
                None => "{ deliveryCounts { pending processing delivered failed } }".to_string(),
            };
            let body = app.gql(key, &query, json!({})).await;
            let c = &body["data"]["deliveryCounts"];
            [
                c["pending"].as_i64().unwrap(),
                c["processing"].as_i64().unwrap(),
                c["delivered"].as_i64().unwrap(),
                c["failed"].as_i64().unwrap(),
            ]
        }
    };
    assert_eq!(counts(None).await, [4, 0, 0, 0]);
    assert_eq!(counts(Some("two")).await, [1, 0, 0, 0]);
    let mut conn = app.db.connect().await;
    let claimed =
        support::harness::claim_at(&mut conn, Utc::now(), std::time::Duration::from_secs(60), 2)
            .await
            .unwrap();
    assert_eq!(counts(None).await, [2, 2, 0, 0]);
    // Claims take turns across endpoints: the oldest of each.
    let mut taken: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    taken.sort();
    let mut expected = vec![ids[0].as_str(), ids[3].as_str()];
    expected.sort();
    assert_eq!(taken, expected);
    for (delivery, sql) in [
        (
            &ids[1],
            "state = 'delivered', attempts = 1, cycle_attempts = 1, completed_at = now()",
        ),
        (
            &ids[2],
            "state = 'failed', attempts = 5, cycle_attempts = 5, completed_at = now()",
        ),
    ] {
        diesel::sql_query(format!(
            "UPDATE webhook_deliveries SET {sql} WHERE id = '{delivery}' AND state = 'pending'"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    assert_eq!(counts(None).await, [0, 2, 1, 1]);
    let claims: Vec<_> = claimed
        .iter()
        .map(|claim| (&claim.id, &claim.claim_token))
        .collect();
    hymical_forms::testing::db::queue::hand_back(&mut conn, &claims)
        .await
        .unwrap();
    assert_eq!(counts(None).await, [2, 0, 1, 1]);
    let body = app
        .gql(
            &key,
            "mutation { replayDeliveries(filter: {}) { count } }",
            json!({}),
        )
        .await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 1);
    assert_eq!(counts(None).await, [3, 0, 1, 0]);
    assert_eq!(counts(Some("two")).await, [1, 0, 0, 0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn nested_connections_of_a_list_of_endpoints_are_batched() {
    let db = TestDb::new().await;
    seed(&db, 30, 1).await;
    let (app, counter) = TestApp::start_logged(db, &[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    let (_, key) = app.create_key("nested").await;
    for n in 0..20 {
        app.webhook_endpoint(&format!("extra-{n:02}"), "https://a.example/h")
            .await;
        app.submit(&format!("extra-{n:02}"), "a=1").await;
        app.submit(&format!("extra-{n:02}"), "a=2").await;
    }
    let query = "{ endpoints(first: 30) { edges { node { id deliveries(first: 1) { edges { node { id } } pageInfo { hasNextPage } } submissions(first: 1) { edges { node { id } } } } } } }";
    app.gql(&key, query, json!({})).await;
    counter.reset();
    let body = app.gql(&key, query, json!({})).await;
    let statements = counter.statements();
    let edges = body["data"]["endpoints"]["edges"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(edges.len(), 21);
    let extra = edges
        .iter()
        .find(|e| e["node"]["id"] == "extra-19")
        .unwrap();
    assert_eq!(
        extra["node"]["deliveries"]["edges"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(extra["node"]["deliveries"]["pageInfo"]["hasNextPage"], true);
    let paged = edges.iter().find(|e| e["node"]["id"] == "paged").unwrap();
    assert_eq!(
        paged["node"]["submissions"]["edges"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // One statement per nested list (per batch), not one per endpoint (21 each).
    assert!(
        statements <= 8,
        "{statements} statements for 21 endpoints with two nested lists"
    );
}
