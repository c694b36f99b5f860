//! Expensive GraphQL documents are refused before anything expands them, over HTTP and
//! over WebSocket; public intake keeps answering while they arrive. A fragment bomb of
//! depth 40 (2^40 fields) can only be answered at all if it was refused unexpanded; the
//! times are printed, not asserted (a loaded machine is no verdict: the latency figures
//! are `cargo bench --bench graphql_pressure`'s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hymical_forms::testing::clock::SystemClock;
use serde_json::json;

use support::harness::TestApp;
use support::ws_client::WsClient;

/// Fragments each spreading the previous one twice: 2^depth fields once expanded, in
/// well under a kilobyte.
fn fragment_bomb(depth: usize) -> String {
    let mut query = format!("query {{ ...f{depth} }}\nfragment f1 on Query {{ version }}\n");
    for level in 1..depth {
        query.push_str(&format!(
            "fragment f{} on Query {{ ...f{level} ...f{level} }}\n",
            level + 1
        ));
    }
    query
}

fn documents() -> Vec<(&'static str, serde_json::Value)> {
    let aliases: String = (0..12_000).map(|i| format!("a{i}: version ")).collect();
    vec![
        ("fragment bomb", json!({ "query": fragment_bomb(40) })),
        (
            "alias flood",
            json!({ "query": format!("{{ {aliases} }}") }),
        ),
        (
            "deep nesting",
            json!({ "query": format!("{}{}", "{ a ".repeat(5_000), "}".repeat(5_000)) }),
        ),
        (
            "giant variables",
            json!({
                "query": "query($ids: [ID!]) { version }",
                "variables": { "ids": (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>() },
            }),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn expensive_documents_are_refused_before_they_run() {
    let app = TestApp::start_without_rate_limit().await;
    let (_, key) = app.create_key("ops").await;
    assert!(fragment_bomb(40).len() < 2048);
    for (name, body) in documents() {
        let started = Instant::now();
        let response = app
            .http
            .post(app.url("/graphql"))
            .header("authorization", format!("Bearer {key}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let took = started.elapsed();
        let status = response.status().as_u16();
        let answer: serde_json::Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{name}: {answer}");
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
            "{name}: {answer}"
        );
        assert!(answer.get("data").is_none(), "{name}");
        println!("{name}: refused in {took:?}");
    }
    // With the modern media type a refused document is a 400.
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("authorization", format!("Bearer {key}"))
        .header("accept", "application/graphql-response+json")
        .json(&json!({ "query": fragment_bomb(40) }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    // Over WebSocket: an `error` for the operation, the connection stays open.
    let mut client = WsClient::ready(&format!("ws://{}/graphql/ws", app.addr), &key).await;
    let started = Instant::now();
    client
        .send(
            json!({ "type": "subscribe", "id": "bomb", "payload": { "query": fragment_bomb(40) } }),
        )
        .await;
    let refused = client.next_json().await;
    println!(
        "fragment bomb over WebSocket: refused in {:?}",
        started.elapsed()
    );
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["payload"][0]["extensions"]["code"],
        "QUERY_TOO_COMPLEX"
    );
    client.send(json!({ "type": "ping" })).await;
    assert_eq!(client.next_json().await["type"], "pong");
}

#[tokio::test(flavor = "multi_thread")]
async fn public_intake_keeps_answering_while_bombs_arrive() {
    let app = TestApp::start_without_rate_limit().await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;
    let (_, key) = app.create_key("ops").await;
    let bombs = {
        let (http, url, key) = (app.http.clone(), app.url("/graphql"), key.clone());
        tokio::spawn(async move {
            for _ in 0..20 {
                for (_, body) in documents() {
                    let _ = http
                        .post(&url)
                        .header("authorization", format!("Bearer {key}"))
                        .json(&body)
                        .send()
                        .await;
                }
            }
        })
    };
    let mut slowest = Duration::ZERO;
    for n in 0..30 {
        let started = Instant::now();
        let response = app
            .post_form(
                "contact",
                Some("application/x-www-form-urlencoded"),
                format!("n={n}"),
                &[],
            )
            .await;
        assert_eq!(response.status(), 202);
        slowest = slowest.max(started.elapsed());
    }
    bombs.await.unwrap();
    println!("slowest intake request while bombs arrived: {slowest:?}");
}

/// `endpoints(first:100){nodes{deliveryCounts{pending}}}` repeated under 499 aliases
/// (34 KB): each alias costs its hundred rows' counts, so the whole is refused before any
/// statement runs; one such page costs the same statements for 3 endpoints as for 30, and
/// its counts are right.
#[tokio::test(flavor = "multi_thread")]
async fn list_fields_cost_what_their_pages_may_hold() {
    let db = support::harness::TestDb::new().await;
    let (app, counter) = TestApp::start_logged(db, &[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    let (_, key) = app.create_key("ops").await;
    for n in [0, 2] {
        app.insert_endpoint(&support::harness::endpoint(&format!("form-{n}")))
            .await;
    }
    // No worker runs here: its deliveries stay pending.
    app.webhook_endpoint("form-1", "https://receiver.example/hook")
        .await;
    for n in 0..4 {
        let response = app
            .post_form(
                "form-1",
                Some("application/x-www-form-urlencoded"),
                format!("n={n}"),
                &[],
            )
            .await;
        assert_eq!(response.status(), 202);
    }
    let page = "{ endpoints(first: 100) { nodes { id deliveryCounts { pending } } } }";
    // Warm the pool, then the cost of authenticating alone.
    app.gql(&key, page, json!({})).await;
    counter.reset();
    app.gql(&key, "{ version }", json!({})).await;
    let authentication = counter.statements();

    let aliases: String = (0..499)
        .map(|i| {
            format!("a{i}: endpoints(first: 100) {{ nodes {{ deliveryCounts {{ pending }} }} }} ")
        })
        .collect();
    let attack = format!("{{ {aliases} }}");
    assert!(attack.len() > 30_000);
    counter.reset();
    let refused = app.gql(&key, &attack, json!({})).await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
        "{refused}"
    );
    assert!(refused.get("data").is_none());
    assert_eq!(
        counter.statements(),
        authentication,
        "the refused document reached the database"
    );

    counter.reset();
    let small = app.gql(&key, page, json!({})).await;
    let small_cost = counter.statements();
    let nodes = small["data"]["endpoints"]["nodes"]
        .as_array()
        .expect("nodes");
    for node in nodes {
        let expected = if node["id"] == "form-1" { 4 } else { 0 };
        assert_eq!(node["deliveryCounts"]["pending"], expected, "{node}");
    }
    for n in 3..30 {
        app.insert_endpoint(&support::harness::endpoint(&format!("form-{n}")))
            .await;
    }
    counter.reset();
    let large = app.gql(&key, page, json!({})).await;
    assert_eq!(
        large["data"]["endpoints"]["nodes"].as_array().map(Vec::len),
        Some(30)
    );
    assert_eq!(
        counter.statements(),
        small_cost,
        "the counts of 30 endpoints cost more statements than those of 3"
    );
}

/// One operation makes at most `FORMS_GRAPHQL_MAX_DATABASE_CALLS` calls: the fields past
/// its allowance fail with `QUERY_TOO_COMPLEX`, the others are answered, and the next
/// operation has a whole allowance again.
#[tokio::test(flavor = "multi_thread")]
async fn an_operation_has_an_allowance_of_database_calls() {
    let app = TestApp::start_with(
        &[("FORMS_GRAPHQL_MAX_DATABASE_CALLS", "3")],
        Arc::new(SystemClock),
    )
    .await;
    let (_, key) = app.create_key("ops").await;
    // Each root `deliveryCounts` is a call of its own.
    let aliases: String = (0..5)
        .map(|i| format!("c{i}: deliveryCounts {{ pending }} "))
        .collect();
    let answer = app.gql(&key, &format!("{{ {aliases} }}"), json!({})).await;
    let errors = answer["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 2, "{answer}");
    for error in errors {
        assert_eq!(error["extensions"]["code"], "QUERY_TOO_COMPLEX", "{answer}");
    }
    let answered = (0..5)
        .filter(|i| answer["data"][format!("c{i}")]["pending"] == 0)
        .count();
    assert_eq!(answered, 3, "{answer}");
    let again = app
        .gql(&key, "{ deliveryCounts { pending } }", json!({}))
        .await;
    assert!(again.get("errors").is_none(), "{again}");
}

/// A document written to fail validation everywhere gets the first 50 errors and one
/// saying how many more there were, not one error per mistake.
#[tokio::test(flavor = "multi_thread")]
async fn validation_errors_are_capped() {
    let app = TestApp::start().await;
    let (_, key) = app.create_key("ops").await;
    let unknown: String = (0..300).map(|i| format!("f{i} ")).collect();
    let answer = app.gql(&key, &format!("{{ {unknown} }}"), json!({})).await;
    let errors = answer["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 51, "{answer}");
    assert_eq!(
        errors[50]["message"],
        "250 more validation errors were left out"
    );
    assert!(answer.get("data").is_none());
}

/// GraphQL's handles share a part of the pool: with it in use, a GraphQL call waits while
/// a call of intake or the workers (the whole pool) goes straight through.
#[tokio::test(flavor = "multi_thread")]
async fn graphql_holds_only_its_share_of_the_pool() {
    use diesel_async::RunQueryDsl;
    let db = support::harness::TestDb::new().await;
    let (_, pool) = support::harness::pool(&db, None).await;
    let share = pool.share(1);
    // Each shared call notes when its work began and ended.
    let sleep = |share: hymical_forms::testing::db::Db| async move {
        share
            .run(async |conn| {
                let began = Instant::now();
                diesel::sql_query("SELECT pg_sleep(0.5)")
                    .execute(conn)
                    .await?;
                Ok((began, Instant::now()))
            })
            .await
    };
    let holding = tokio::spawn(sleep(share.clone()));
    // Until the first call holds the share's one connection.
    for _ in 0..200 {
        if pool.usage().in_use > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = tokio::spawn(sleep(share.clone()));
    pool.run(async |conn| {
        diesel::sql_query("SELECT 1").execute(conn).await?;
        Ok(())
    })
    .await
    .expect("the rest of the pool answers");
    let direct_done = Instant::now();
    let (_, first_ended) = holding.await.unwrap().expect("first");
    let (second_began, _) = second.await.unwrap().expect("second");
    assert!(
        direct_done < first_ended,
        "the direct call waited for the share"
    );
    assert!(
        second_began >= first_ended,
        "two calls held a share of one at once"
    );
}
