//! Intake's group commit, with explicit interleavings: a test connection holds a lock
//! the outbox statement needs, so submissions pile up behind the writers; then the lock
//! goes and the pile is written in a few transactions, each request with its own answer.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, RunQueryDsl};
use hymical_forms::testing::clock::SystemClock;
use serde_json::Value;

use support::harness::TestApp;

/// Posts `bodies` concurrently (each with its headers) while the submissions table is
/// locked; checks nobody is answered before the lock goes; returns (status, body) in order.
async fn post_while_locked(
    app: &TestApp,
    endpoint: &str,
    requests: Vec<(String, Vec<(&'static str, String)>)>,
) -> Vec<(u16, Value)> {
    let mut lock = app.db.connect().await;
    lock.begin_test_transaction().await.unwrap();
    diesel::sql_query("LOCK TABLE submissions IN ACCESS EXCLUSIVE MODE")
        .execute(&mut lock)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for (body, headers) in requests {
        let http = app.http.clone();
        let url = app.url(&format!("/f/{endpoint}"));
        tasks.push(tokio::spawn(async move {
            let mut request = http
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }));
    }
    // Both writers hold a batch and wait on the lock; the rest queue behind them.
    app.db.until_waiting_for_locks(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        tasks.iter().all(|task| !task.is_finished()),
        "a request was answered before its submission was committed"
    );
    drop(lock); // rolls back the test transaction: the lock goes
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_submissions_share_transactions_and_keep_their_own_answers() {
    let app = TestApp::start_without_rate_limit().await;
    app.webhook_endpoint("batch", "https://example.com/hook")
        .await;
    let key = |n: u32| ("idempotency-key", format!("group-commit-key-{n:04}"));
    let mut requests: Vec<(String, Vec<(&'static str, String)>)> =
        (0..20).map(|n| (format!("n={n}"), Vec::new())).collect();
    // One key twice with one body and once with another, all in the same pile. Whichever
    // arrives first is stored; a request with the stored body is its replay, one with the
    // other body is 409.
    requests.push(("k=same".into(), vec![key(1)]));
    requests.push(("k=same".into(), vec![key(1)]));
    requests.push(("k=other".into(), vec![key(1)]));
    let answers = post_while_locked(&app, "batch", requests).await;

    let plain = &answers[..20];
    assert!(plain.iter().all(|(status, _)| *status == 202), "{plain:?}");
    let keyed = &answers[20..];
    let stored: Vec<usize> = (0..3)
        .filter(|&i| keyed[i].0 == 202 && keyed[i].1["idempotent_replay"] == false)
        .collect();
    assert_eq!(stored.len(), 1, "exactly one stored: {keyed:?}");
    let same_body = |i: usize| i < 2;
    for i in 0..3 {
        if i == stored[0] {
            continue;
        }
        if same_body(i) == same_body(stored[0]) {
            assert_eq!(
                keyed[i].0, 202,
                "the stored body again is its replay: {keyed:?}"
            );
            assert_eq!(keyed[i].1["idempotent_replay"], true, "{keyed:?}");
            assert_eq!(
                keyed[i].1["submission_id"],
                keyed[stored[0]].1["submission_id"]
            );
        } else {
            assert_eq!(
                keyed[i].0, 409,
                "another body with the key is refused: {keyed:?}"
            );
        }
    }

    // 21 submissions stored, each with its delivery and event, in far fewer transactions.
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM submissions").await,
        21
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM webhook_deliveries")
            .await,
        21
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM delivery_events WHERE kind = 'created'")
            .await,
        21
    );
    let transactions = app
        .db
        .count("SELECT count(DISTINCT xmin::text) AS n FROM submissions")
        .await;
    assert!(
        transactions <= 4,
        "21 submissions in {transactions} transactions"
    );
    // A delivery is always written in its submission's transaction.
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM submissions s JOIN webhook_deliveries d ON d.submission_id = s.id WHERE s.xmin::text <> d.xmin::text",
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pile_from_one_address_is_limited_exactly() {
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "6"),
            ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "4"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    app.webhook_endpoint("limited", "https://example.com/hook")
        .await;
    // Ten from one address: six pass the source limit, four of those the endpoint's.
    let requests = (0..10).map(|n| (format!("n={n}"), Vec::new())).collect();
    let answers = post_while_locked(&app, "limited", requests).await;
    let mut statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [202, 202, 202, 202, 429, 429, 429, 429, 429, 429],
        "{answers:?}"
    );
    let scopes: Vec<&str> = answers
        .iter()
        .filter(|(status, _)| *status == 429)
        .map(|(_, body)| body["error"]["details"]["scope"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        scopes.iter().filter(|s| **s == "ip").count(),
        4,
        "{answers:?}"
    );
    assert_eq!(
        scopes.iter().filter(|s| **s == "endpoint").count(),
        2,
        "{answers:?}"
    );
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM submissions").await,
        4
    );
    // One statement counted both scopes: all ten on the source's counter, only the six
    // within the source limit on the endpoint's.
    assert_eq!(
        app.db
            .count("SELECT attempts::bigint AS n FROM rate_limit_counters WHERE limiter = 'ip'")
            .await,
        10
    );
    assert_eq!(
        app.db
            .count(
                "SELECT attempts::bigint AS n FROM rate_limit_counters WHERE limiter = 'endpoint'"
            )
            .await,
        6
    );
}

/// The writers judge "due" by the clock when they write a batch, not when they started.
#[tokio::test(flavor = "multi_thread")]
async fn deliveries_are_due_by_the_clock_of_their_batch() {
    use chrono::TimeZone;
    let start = chrono::Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap();
    let clock = Arc::new(hymical_forms::testing::clock::ManualClock::new(start));
    let app = TestApp::start_with(&[("FORMS_RATE_LIMIT_ENABLED", "false")], clock.clone()).await;
    app.webhook_endpoint("later", "https://example.com/hook")
        .await;
    clock.advance(chrono::Duration::hours(3));
    app.submit("later", "a=1").await;
    let delivery = app.db.deliveries().await.remove(0);
    assert_eq!(delivery.next_attempt_at, start + chrono::Duration::hours(3));
}
