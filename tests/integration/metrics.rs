//! `/metrics` of a real `serve` process: posts, deliveries, a failure and a replay move the
//! counters by exactly what happened, the output parses as Prometheus text, the key rule
//! and the separate listener hold.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hymical_forms::testing::clock::SystemClock;

use support::harness::{free_port, graphql_data, wait_for_status, ServeProcess, TestApp};
use support::receiver::Receiver;

/// Every sample of a scrape, keyed by name and sorted labels (`name{a="1",b="2"}`).
pub fn samples(text: &str) -> HashMap<String, f64> {
    let lines = text.lines().map(|line| Ok(line.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    let mut samples = HashMap::new();
    for sample in scrape.samples {
        let mut labels: Vec<_> = sample.labels.iter().collect();
        labels.sort();
        let labels: Vec<String> = labels
            .into_iter()
            .map(|(name, value)| format!("{name}=\"{value}\""))
            .collect();
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(buckets) => {
                // The `+Inf` bucket: how many observations there were.
                buckets.iter().map(|b| b.count).fold(0.0, f64::max)
            }
            prometheus_parse::Value::Summary(_) => continue,
        };
        samples.insert(format!("{}{{{}}}", sample.metric, labels.join(",")), value);
    }
    samples
}

pub async fn scrape(url: &str, key: Option<&str>) -> (u16, String, String) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("scrape");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, content_type, response.text().await.expect("body"))
}

pub fn value(samples: &HashMap<String, f64>, key: &str) -> f64 {
    samples.get(key).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_what_happened() {
    let receiver = Receiver::start().await;
    // The in-process app only provides the database and its helpers; the process under
    // test does all the work.
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    app.webhook_endpoint("good", &receiver.url("/ok")).await;
    app.webhook_endpoint("bad", &receiver.url("/failing")).await;
    let (_, key) = app.create_key("scraper").await;
    receiver.failing.store(true, Ordering::SeqCst);

    let serve = ServeProcess::start(
        &app.db,
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "2"),
            ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "0.1"),
            ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "0.1"),
        ],
    );
    wait_for_status(&serve.url("/health"), 200).await;
    let client = reqwest::Client::new();
    let post = |endpoint: &str| {
        client
            .post(serve.url(&format!("/f/{endpoint}")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("email=someone%40example.com&message=secret+words")
            .send()
    };
    for _ in 0..3 {
        assert_eq!(post("good").await.unwrap().status(), 202);
    }
    assert_eq!(post("bad").await.unwrap().status(), 202);
    assert_eq!(post("missing").await.unwrap().status(), 404);

    let rows = app
        .db
        .wait_for_deliveries(60, |rows| {
            rows.len() == 4
                && rows
                    .iter()
                    .all(|d| d.state == "delivered" || d.state == "failed")
        })
        .await;
    let failed = rows
        .iter()
        .find(|d| d.state == "failed")
        .expect("one failed");

    // A scrape needs a key by default.
    let (status, _, _) = scrape(&serve.url("/metrics"), None).await;
    assert_eq!(status, 401);
    let (status, content_type, text) = scrape(&serve.url("/metrics"), Some(&key)).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let before = samples(&text);
    assert_eq!(
        value(&before, "hymical_intake_requests_total{status=\"202\"}"),
        4.0
    );
    assert_eq!(
        value(&before, "hymical_intake_requests_total{status=\"404\"}"),
        1.0
    );
    assert_eq!(
        value(&before, "hymical_intake_request_duration_seconds{}"),
        5.0
    );
    // One post at a time, so one batch each: all five counted against the rate limits (the
    // unknown endpoint too: the per-source limit comes first). The four accepted were
    // counted by the outbox statement that wrote them; only the unknown endpoint's batch,
    // which writes nothing, needed a counting statement of its own.
    assert_eq!(value(&before, "hymical_intake_batches_total{}"), 5.0);
    assert_eq!(
        value(
            &before,
            "hymical_intake_statement_duration_seconds{statement=\"count\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &before,
            "hymical_intake_statement_duration_seconds{statement=\"outbox\"}"
        ),
        4.0
    );
    assert_eq!(
        value(
            &before,
            "hymical_delivery_attempts_total{kind=\"webhook\",outcome=\"succeeded\"}"
        ),
        3.0
    );
    assert_eq!(
        value(
            &before,
            "hymical_delivery_attempts_total{kind=\"webhook\",outcome=\"http_error\"}"
        ),
        2.0
    );
    assert_eq!(
        value(
            &before,
            "hymical_delivery_attempt_duration_seconds{kind=\"webhook\"}"
        ),
        5.0
    );
    assert_eq!(
        value(
            &before,
            "hymical_deliveries_finished_total{kind=\"webhook\",state=\"delivered\"}"
        ),
        3.0
    );
    assert_eq!(
        value(
            &before,
            "hymical_deliveries_finished_total{kind=\"webhook\",state=\"failed\"}"
        ),
        1.0
    );
    assert_eq!(
        value(&before, "hymical_delivery_queue{state=\"delivered\"}"),
        3.0
    );
    assert_eq!(
        value(&before, "hymical_delivery_queue{state=\"failed\"}"),
        1.0
    );
    assert_eq!(
        value(&before, "hymical_delivery_queue{state=\"pending\"}"),
        0.0
    );
    assert_eq!(value(&before, "hymical_delivery_oldest_due_seconds{}"), 0.0);
    assert_eq!(value(&before, "hymical_workers_in_flight{}"), 0.0);
    assert_eq!(
        value(&before, "hymical_delivery_late_attempts_total{}"),
        0.0
    );
    assert!(before.contains_key("hymical_db_pool_connections{state=\"idle\"}"));
    assert!(before.contains_key("hymical_db_pool_waiting{}"));
    assert!(
        before
            .keys()
            .any(|k| k.starts_with("process_cpu_seconds_total")),
        "process metrics"
    );
    // Nothing submitted and no key reaches a scrape.
    for secret in ["someone", "secret", &key] {
        assert!(!text.contains(secret), "{secret} in the scrape");
    }

    // Replay the failure with the receiver healed: one more success, one more delivered.
    receiver.failing.store(false, Ordering::SeqCst);
    graphql_data(
        &client,
        &serve.url("/graphql"),
        &key,
        "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state } } }",
        serde_json::json!({ "id": failed.id }),
    )
    .await;
    app.db
        .wait_for_deliveries(60, |rows| rows.iter().all(|d| d.state == "delivered"))
        .await;
    let (_, _, text) = scrape(&serve.url("/metrics"), Some(&key)).await;
    let after = samples(&text);
    assert_eq!(
        value(
            &after,
            "hymical_delivery_attempts_total{kind=\"webhook\",outcome=\"succeeded\"}"
        ),
        4.0
    );
    assert_eq!(
        value(
            &after,
            "hymical_delivery_attempts_total{kind=\"webhook\",outcome=\"http_error\"}"
        ),
        2.0
    );
    assert_eq!(
        value(
            &after,
            "hymical_deliveries_finished_total{kind=\"webhook\",state=\"delivered\"}"
        ),
        4.0
    );
    assert_eq!(
        value(
            &after,
            "hymical_deliveries_finished_total{kind=\"webhook\",state=\"failed\"}"
        ),
        1.0
    );
    assert_eq!(
        value(&after, "hymical_delivery_queue{state=\"delivered\"}"),
        4.0
    );
    assert_eq!(
        value(&after, "hymical_delivery_queue{state=\"failed\"}"),
        0.0
    );
    assert_eq!(
        value(&after, "hymical_intake_requests_total{status=\"202\"}"),
        4.0
    );
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");
    // The failed delivery was logged at WARN, the successes at INFO.
    let failed_line = log
        .lines()
        .find(|line| line.contains("delivery failed"))
        .expect("a line for the failed delivery");
    assert!(failed_line.contains("WARN"), "{failed_line}");
    assert!(
        !log.contains("\u{1b}["),
        "colour codes in a log written to a file"
    );
}

/// A worker-only process serves `/metrics` on a listener of its own, without a key when
/// told so, and nothing else there.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_only_process_serves_metrics_on_its_own_listener() {
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    let metrics_port = free_port();
    let bind = format!("127.0.0.1:{metrics_port}");
    let worker = ServeProcess::start(
        &app.db,
        &[
            ("FORMS_API_ENABLED", "false"),
            ("FORMS_METRICS_BIND", &bind),
            ("FORMS_METRICS_REQUIRE_KEY", "false"),
        ],
    );
    let url = |path: &str| format!("http://{bind}{path}");
    wait_for_status(&url("/health"), 200).await;
    let (status, _, text) = scrape(&url("/metrics"), None).await;
    assert_eq!(status, 200, "{text}");
    let samples = samples(&text);
    assert_eq!(
        value(&samples, "hymical_delivery_queue{state=\"pending\"}"),
        0.0
    );
    assert!(samples.contains_key("hymical_delivery_queue{state=\"pending\"}"));
    // Only metrics here: the API is not served on this listener.
    let status = reqwest::get(url("/graphql"))
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(status, 404);
    let (status, log) = worker.stop();
    assert!(status.success(), "{log}");
}
