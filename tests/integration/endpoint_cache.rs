//! Intake's per-process endpoint cache: a change made through the API takes effect at
//! once in the process that made it and, through the LISTEN connection, in every other
//! process, however long entries may live; a change that sends no notification (written
//! straight into the table) takes effect once the entry is older than
//! `FORMS_ENDPOINT_CACHE_SECONDS`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::harness::{wait_for_status, ServeProcess, TestDb};

fn key(db: &TestDb) -> String {
    let output = db.run_cli(&["keys", "create", "--name", "cache"]);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("key:").map(|k| k.trim().to_string()))
        .expect("a printed key")
}

async fn gql(serve: &ServeProcess, key: &str, query: &str, variables: Value) -> Value {
    reqwest::Client::new()
        .post(serve.url("/graphql"))
        .bearer_auth(key)
        .json(&json!({"query": query, "variables": variables}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn post(serve: &ServeProcess, endpoint: &str) -> u16 {
    support::harness::post_urlencoded(
        &reqwest::Client::new(),
        serve.url(&format!("/f/{endpoint}")),
        "email=a%40example.com",
    )
    .await
    .unwrap()
    .status()
    .as_u16()
}

/// Posts until the answer is `wanted`, for at most `within`; returns how long it took.
async fn until_status(
    serve: &ServeProcess,
    endpoint: &str,
    wanted: u16,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let status = post(serve, endpoint).await;
        if status == wanted {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "still {status} after {:?}, wanted {wanted}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const UPDATE: &str = "mutation($input: UpdateEndpointInput!) { updateEndpoint(input: $input) { endpoint { isActive } } }";

#[tokio::test(flavor = "multi_thread")]
async fn endpoint_changes_reach_every_process() {
    let db = TestDb::new().await;
    // Entries that would live an hour: only notifications can make the change visible.
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_ENDPOINT_CACHE_SECONDS", "3600"),
        ("FORMS_WORKER_ENABLED", "false"),
    ];
    let changer = ServeProcess::start(&db, &vars);
    let other = ServeProcess::start(&db, &vars);
    wait_for_status(&changer.url("/health"), 200).await;
    wait_for_status(&other.url("/health"), 200).await;
    let key = key(&db);

    // "No such endpoint" is cached too, and a creation clears it everywhere.
    assert_eq!(post(&other, "cached").await, 404);
    let created = gql(&changer, &key, "mutation { createEndpoint(input: {id: \"cached\", name: \"Cached\"}) { endpoint { id } } }", json!({})).await;
    assert!(created["errors"].is_null(), "{created}");
    assert_eq!(
        post(&changer, "cached").await,
        202,
        "at once where it was made"
    );
    until_status(&other, "cached", 202, Duration::from_secs(10)).await;

    // Both processes hold the active endpoint; deactivate it through one.
    assert_eq!(post(&other, "cached").await, 202);
    let body = gql(
        &changer,
        &key,
        UPDATE,
        json!({"input": {"id": "cached", "isActive": false}}),
    )
    .await;
    assert_eq!(
        body["data"]["updateEndpoint"]["endpoint"]["isActive"], false,
        "{body}"
    );
    assert_eq!(
        post(&changer, "cached").await,
        409,
        "at once where it was made"
    );
    until_status(&other, "cached", 409, Duration::from_secs(10)).await;

    // And back.
    gql(
        &changer,
        &key,
        UPDATE,
        json!({"input": {"id": "cached", "isActive": true}}),
    )
    .await;
    assert_eq!(post(&changer, "cached").await, 202);
    until_status(&other, "cached", 202, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unnotified_change_takes_effect_within_the_maximum_age() {
    let db = TestDb::new().await;
    let serve = ServeProcess::start(
        &db,
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ENDPOINT_CACHE_SECONDS", "1"),
            ("FORMS_WORKER_ENABLED", "false"),
        ],
    );
    wait_for_status(&serve.url("/health"), 200).await;
    let key = key(&db);
    gql(
        &serve,
        &key,
        "mutation { createEndpoint(input: {id: \"quiet\", name: \"Quiet\"}) { endpoint { id } } }",
        json!({}),
    )
    .await;
    assert_eq!(post(&serve, "quiet").await, 202);
    // Written straight into the table: no notification, only the age bound applies.
    let mut conn = db.connect().await;
    diesel_async::RunQueryDsl::execute(
        diesel::sql_query("UPDATE endpoints SET is_active = false WHERE id = 'quiet'"),
        &mut conn,
    )
    .await
    .unwrap();
    let took = until_status(&serve, "quiet", 409, Duration::from_secs(10)).await;
    assert!(
        took < Duration::from_secs(3),
        "took {took:?} with a 1 s bound"
    );
}
