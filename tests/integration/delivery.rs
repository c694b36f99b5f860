//! Webhook delivery against real local receivers (docs/delivery.md).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use hymical_forms::testing::clock::{Clock, ManualClock, SystemClock};
use hymical_forms::testing::outbound::StaticResolver;

use support::harness::TestApp;
use support::receiver::Receiver;

/// Loopback receivers need the development flag; SSRF tests turn it off explicitly.
const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
];

/// The receiver-side verification snippet of docs/delivery.md, in Python, run over the exact
/// bytes received.
const VERIFY_PY: &str = r#"
import hashlib
import hmac
import sys


def verify(raw_body: bytes, header: str, secret: str) -> bool:
    version, _, digest = header.partition("=")
    if version != "v1":
        return False
    expected = hmac.new(secret.encode(), raw_body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(digest, expected)


body = open(sys.argv[1], "rb").read()
print("valid" if verify(body, sys.argv[2], sys.argv[3]) else "invalid")
"#;

/// Whether the snippet of docs/delivery.md verifies `header` over `body` with `secret`.
pub fn python_verifies(body: &[u8], header: &str, secret: &str) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("verify.py");
    let body_path = dir.path().join("body.bin");
    std::fs::write(&script, VERIFY_PY).unwrap();
    std::fs::write(&body_path, body).unwrap();
    let output = std::process::Command::new("python3")
        .arg(&script)
        .arg(&body_path)
        .arg(header)
        .arg(secret)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim() == "valid"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_delivery_verifies_with_the_documented_snippet() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let secret = app
        .webhook_endpoint("contact", &receiver.url("/hook"))
        .await;
    let submission = app
        .submit(
            "contact",
            "name=Zo%C3%AB+%E2%9C%93&topics=billing&topics=api",
        )
        .await;
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 1);

    let received = receiver.wait_for(1).await;
    let request = &received[0];
    assert_eq!(request.headers["content-type"], "application/json");
    assert_eq!(
        request.headers["user-agent"],
        format!("Hymical-Forms/{}", env!("CARGO_PKG_VERSION"))
    );
    let signature = request.headers["hymical-signature"].to_str().unwrap();
    assert!(signature.starts_with("v1="));
    assert!(
        python_verifies(&request.body, signature, &secret),
        "the documented snippet verifies"
    );
    assert!(!python_verifies(&request.body, signature, "whsec_wrong"));

    let body = std::str::from_utf8(&request.body).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(parsed["type"], "submission.received");
    assert_eq!(parsed["submission"]["id"], submission.as_str());
    assert_eq!(parsed["submission"]["endpoint_id"], "contact");
    assert!(
        body.contains(r#""fields":{"name":["Zoë ✓"],"topics":["billing","api"]}"#),
        "{body}"
    );
    assert!(body.starts_with(r#"{"type":"submission.received","submission":{"id":"#));
    assert!(!body.contains(&secret), "the secret is never in a body");

    let delivery = &app.db.deliveries().await[0];
    assert_eq!(delivery.state, "delivered");
    assert!(delivery.completed_at.is_some() && delivery.claim_token.is_none());
    assert_eq!((delivery.attempts, delivery.cycle_attempts), (1, 1));
    let attempts = app.db.attempts(&delivery.id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        (
            attempts[0].attempt_number,
            attempts[0].outcome.as_str(),
            attempts[0].response_status
        ),
        (1, "succeeded", Some(200))
    );
    assert!(!attempts[0].late && attempts[0].duration_ms >= 0);
    assert!(
        !attempts[0].row_json.contains(&secret),
        "the secret is in no attempt row"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_attempt_sends_the_same_bytes() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let secret = app
        .webhook_endpoint("contact", &receiver.url("/status/503"))
        .await;
    app.submit("contact", "a=%E2%82%AC&b=2&a=3").await;
    let worker = app.worker(None);
    let mut conn = app.db.connect().await;
    for _ in 0..3 {
        assert_eq!(worker.run_once().await.unwrap(), 1);
        // Make the retry due now.
        diesel_async::RunQueryDsl::execute(
            diesel::sql_query(
                "UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 second'",
            ),
            &mut conn,
        )
        .await
        .unwrap();
    }
    let received = receiver.received();
    assert_eq!(received.len(), 3);
    assert!(received.iter().all(|r| r.body == received[0].body));
    assert!(received
        .iter()
        .all(|r| r.headers["hymical-signature"] == received[0].headers["hymical-signature"]));
    assert!(python_verifies(
        &received[2].body,
        received[2].headers["hymical-signature"].to_str().unwrap(),
        &secret
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn classification_against_real_answers() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "0.5"),
            ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "0.5"),
            ("FORMS_WORKER_LEASE_SECONDS", "5"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    let closed_port = support::harness::free_port();
    let mut cases: Vec<(String, &str, Option<i32>, &str)> = Vec::new();
    for status in [200, 201, 204, 299] {
        cases.push((
            receiver.url(&format!("/status/{status}")),
            "succeeded",
            Some(status),
            "delivered",
        ));
    }
    for status in [301, 302, 400, 401, 404, 409, 410] {
        cases.push((
            receiver.url(&format!("/status/{status}")),
            "http_error",
            Some(status),
            "failed",
        ));
    }
    for status in [408, 425, 429, 500, 502, 503] {
        cases.push((
            receiver.url(&format!("/status/{status}")),
            "http_error",
            Some(status),
            "pending",
        ));
    }
    cases.push((
        format!("http://127.0.0.1:{closed_port}/hook"),
        "network_error",
        None,
        "pending",
    ));
    cases.push((receiver.url("/hang"), "timeout", None, "pending"));

    let worker = app.worker(None);
    for (index, (url, outcome, status, state)) in cases.iter().enumerate() {
        let endpoint = format!("case-{index}");
        app.webhook_endpoint(&endpoint, url).await;
        app.submit(&endpoint, "a=1").await;
        assert_eq!(worker.run_once().await.unwrap(), 1, "{url}");
        let delivery = app.db.deliveries().await.into_iter().last().unwrap();
        let attempts = app.db.attempts(&delivery.id).await;
        assert_eq!(attempts.len(), 1, "{url}");
        assert_eq!(attempts[0].outcome, *outcome, "{url}");
        assert_eq!(attempts[0].response_status, *status, "{url}");
        assert_eq!(delivery.state, *state, "{url}");
        if *outcome != "succeeded" {
            let error = attempts[0].error.clone().unwrap_or_default();
            assert!(
                !error.is_empty() && error.chars().count() <= 500,
                "{url}: {error}"
            );
            assert!(
                !error.contains("must never be stored"),
                "no response body: {error}"
            );
        }
        assert!(!attempts[0].row_json.contains("must never be stored"));
    }
    let paths: Vec<String> = receiver.received().into_iter().map(|r| r.path).collect();
    assert!(
        !paths.contains(&"/landing".to_string()),
        "redirects are not followed: {paths:?}"
    );
    receiver.stop_hanging();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_retry_schedule_with_an_injected_clock() {
    let receiver = Receiver::start().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = TestApp::start_with(DEV, clock.clone()).await;
    app.webhook_endpoint("contact", &receiver.url("/status/503"))
        .await;
    app.submit("contact", "a=1").await;
    let worker = app.worker(None);

    // Immediately, then 10, 20, 40, 80 s later; failed after the fifth.
    let mut expected_due = start;
    for (attempt, wait) in [(1, 10), (2, 20), (3, 40), (4, 80)] {
        clock.set(expected_due);
        assert_eq!(
            worker.run_once().await.unwrap(),
            1,
            "attempt {attempt} is due"
        );
        let delivery = &app.db.deliveries().await[0];
        assert_eq!(delivery.state, "pending");
        assert_eq!(
            (delivery.attempts, delivery.cycle_attempts),
            (attempt, attempt)
        );
        expected_due += chrono::Duration::seconds(wait);
        assert_eq!(
            delivery.next_attempt_at, expected_due,
            "attempt {attempt} schedules +{wait}s"
        );
        clock.set(expected_due - chrono::Duration::milliseconds(1));
        assert_eq!(
            worker.run_once().await.unwrap(),
            0,
            "not due a millisecond early"
        );
    }
    clock.set(expected_due);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let delivery = &app.db.deliveries().await[0];
    assert_eq!(delivery.state, "failed");
    assert_eq!(delivery.completed_at, Some(expected_due));
    let attempts = app.db.attempts(&delivery.id).await;
    assert_eq!(
        attempts
            .iter()
            .map(|a| a.attempt_number)
            .collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert!(attempts
        .iter()
        .all(|a| a.outcome == "http_error" && a.response_status == Some(503)));
    let started: Vec<_> = attempts
        .iter()
        .map(|a| (a.attempted_at - start).num_seconds())
        .collect();
    assert_eq!(
        started,
        [0, 10, 30, 70, 150],
        "attempted_at is when each request started"
    );
    clock.advance(chrono::Duration::days(1));
    assert_eq!(worker.run_once().await.unwrap(), 0, "terminal is terminal");
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_initial_cap_and_allowance() {
    let receiver = Receiver::start().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = TestApp::start_with(
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "3"),
            ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "7"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "4"),
        ],
        clock.clone(),
    )
    .await;
    app.webhook_endpoint("contact", &receiver.url("/status/500"))
        .await;
    app.submit("contact", "a=1").await;
    let worker = app.worker(None);
    let mut waits = Vec::new();
    for _ in 0..4 {
        assert_eq!(worker.run_once().await.unwrap(), 1);
        let delivery = &app.db.deliveries().await[0];
        if delivery.state == "pending" {
            waits.push((delivery.next_attempt_at - clock.now()).num_seconds());
            clock.set(delivery.next_attempt_at);
        }
    }
    assert_eq!(waits, [3, 6, 7]);
    assert_eq!(app.db.deliveries().await[0].state, "failed");
    assert_eq!(
        app.db
            .attempts(&app.db.deliveries().await[0].id)
            .await
            .len(),
        4
    );
}

fn resolver_to_loopback(name: &str) -> StaticResolver {
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    StaticResolver(HashMap::from([(name.to_string(), vec![loopback])]))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_that_resolves_to_loopback_is_refused_at_send_time() {
    let receiver = Receiver::start().await;
    let url = format!("http://hooks.example.test:{}/hook", receiver.port());

    let strict = TestApp::start_without_rate_limit().await;
    strict.webhook_endpoint("contact", &url).await;
    strict.submit("contact", "a=1").await;
    assert_eq!(
        strict
            .worker(Some(resolver_to_loopback("hooks.example.test")))
            .run_once()
            .await
            .unwrap(),
        1
    );
    let delivery = &strict.db.deliveries().await[0];
    assert_eq!(delivery.state, "failed");
    let attempts = strict.db.attempts(&delivery.id).await;
    assert_eq!(attempts[0].outcome, "blocked_destination");
    assert!(
        receiver.received().is_empty(),
        "nothing reached the internal address"
    );

    // With the development flag the same name is allowed.
    let dev = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    dev.webhook_endpoint("contact", &url).await;
    dev.submit("contact", "a=1").await;
    assert_eq!(
        dev.worker(Some(resolver_to_loopback("hooks.example.test")))
            .run_once()
            .await
            .unwrap(),
        1
    );
    assert_eq!(dev.db.deliveries().await[0].state, "delivered");
    assert_eq!(receiver.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_queued_under_the_flag_is_refused_after_a_restart_without_it() {
    let receiver = Receiver::start().await;
    let dev = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    dev.webhook_endpoint("contact", &receiver.url("/hook"))
        .await;
    dev.submit("contact", "a=1").await;
    // "Restart" with the flag off: a new app and worker on the same database.
    let strict = TestApp::start_on(dev.db.clone(), &[], Arc::new(SystemClock)).await;
    assert_eq!(strict.worker(None).run_once().await.unwrap(), 1);
    let delivery = &strict.db.deliveries().await[0];
    assert_eq!(delivery.state, "failed");
    assert_eq!(
        strict.db.attempts(&delivery.id).await[0].outcome,
        "blocked_destination"
    );
    assert!(receiver.received().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_erased_submission_fails_its_delivery_without_an_attempt() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    app.webhook_endpoint("contact", &receiver.url("/hook"))
        .await;
    let submission = app.submit("contact", "a=1").await;
    let mut conn = app.db.connect().await;
    diesel_async::RunQueryDsl::execute(
        diesel::sql_query(format!("DELETE FROM submissions WHERE id = '{submission}'")),
        &mut conn,
    )
    .await
    .unwrap();
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let delivery = &app.db.deliveries().await[0];
    assert_eq!(delivery.state, "failed");
    assert!(delivery.submission_id.is_none());
    assert!(app.db.attempts(&delivery.id).await.is_empty());
    assert!(receiver.received().is_empty());
}
