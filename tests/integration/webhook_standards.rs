//! Standard Webhooks signing, verified by the specification's own libraries and Svix's,
//! and secret rotation with an overlap window (docs/receiving-webhooks.md).

use std::sync::Arc;

use chrono::Utc;
use hymical_forms::testing::clock::{Clock, ManualClock};
use serde_json::{json, Value};

use crate::delivery::python_verifies;
use crate::verifiers::{self, all_verify, Case, Library};
use support::harness::TestApp;
use support::receiver::{Received, Receiver};

const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_WEBHOOK_MAX_ATTEMPTS", "2"),
];

fn header<'a>(request: &'a Received, name: &str) -> &'a str {
    request
        .headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_else(|| panic!("{name} missing"))
}

async fn create_endpoint(app: &TestApp, key: &str, id: &str, url: &str) -> String {
    let body = app
        .gql(
            key,
            "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { webhookSecret } }",
            json!({ "input": { "id": id, "name": id, "webhookUrl": url } }),
        )
        .await;
    body["data"]["createEndpoint"]["webhookSecret"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string()
}

async fn rotate(app: &TestApp, key: &str, id: &str, overlap: Option<i64>) -> (String, Value) {
    let body = app
        .gql(
            key,
            "mutation($id: ID!, $overlap: Int) { rotateWebhookSecret(endpointId: $id, overlapSeconds: $overlap) {
                webhookSecret endpoint { webhookSecrets { role fingerprint liveUntil } } } }",
            json!({ "id": id, "overlap": overlap }),
        )
        .await;
    let payload = &body["data"]["rotateWebhookSecret"];
    (
        payload["webhookSecret"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"))
            .to_string(),
        payload["endpoint"]["webhookSecrets"].clone(),
    )
}

fn fingerprint(secret: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))[..8].to_string()
}

/// Each library's verdict on `case`: all must agree with `expected`; a refusal's reason
/// must contain `reason` (when given), so it is refused for the reason meant.
async fn judged(case: &Case, expected: bool, reason: Option<&str>, what: &str) {
    for (library, answer) in all_verify(case).await {
        match (&answer, expected) {
            (Ok(()), true) => {}
            (Err(why), false) => {
                if let Some(reason) = reason {
                    assert!(
                        why.to_lowercase().contains(reason),
                        "{library:?} refused {what} for another reason: {why}"
                    );
                }
            }
            _ => panic!("{library:?} on {what}: expected verified={expected}, got {answer:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_deliveries_verify_with_standard_webhooks_and_svix_and_forgeries_do_not() {
    let receiver = Receiver::start().await;
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let app = TestApp::start_with(DEV, clock.clone()).await;
    let (_, key) = app.create_key("standard").await;
    let secret = create_endpoint(&app, &key, "standard", &receiver.url("/failing")).await;
    app.submit(
        "standard",
        "name=Zo%C3%AB+%E2%9C%93&topics=billing&topics=api",
    )
    .await;
    let worker = app.worker(None);

    // Two attempts (500, 500: failed with FORMS_WEBHOOK_MAX_ATTEMPTS=2), a replay, a third
    // attempt (200).
    assert_eq!(worker.run_once().await.unwrap(), 1);
    clock.advance(chrono::Duration::seconds(11));
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let delivery = app.db.deliveries().await.remove(0);
    assert_eq!(delivery.state, "failed");
    receiver
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    clock.advance(chrono::Duration::seconds(5));
    let replayed = app
        .gql(
            &key,
            "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state } } }",
            json!({ "id": delivery.id }),
        )
        .await;
    assert_eq!(
        replayed["data"]["replayDelivery"]["delivery"]["state"], "PENDING",
        "{replayed}"
    );
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!(app.db.delivery(&delivery.id).await.state, "delivered");

    let requests = receiver.wait_for(3).await;
    assert_eq!(requests.len(), 3);
    let first = &requests[0];
    let mut last_timestamp = 0;
    for request in &requests {
        // The same bytes, the same Hymical-Signature (the documented snippet verifies it), the
        // same webhook-id on every attempt and on the replay: the delivery's id.
        assert_eq!(request.body, first.body);
        assert_eq!(
            header(request, "hymical-signature"),
            header(first, "hymical-signature")
        );
        assert!(python_verifies(
            &request.body,
            header(request, "hymical-signature"),
            &secret
        ));
        assert_eq!(header(request, "webhook-id"), delivery.id);
        // The attempt's own time, in seconds.
        let timestamp: i64 = header(request, "webhook-timestamp").parse().unwrap();
        assert!(timestamp > last_timestamp);
        last_timestamp = timestamp;
        let signature = header(request, "webhook-signature");
        assert!(
            signature.starts_with("v1,") && !signature.contains(' '),
            "{signature}"
        );

        judged(&Case::of(request, &secret), true, None, "a real request").await;
    }

    // Forgeries: a tampered body, a wrong secret, a changed id.
    let mut tampered = Case::of(first, &secret);
    let at = tampered
        .body
        .iter()
        .position(|b| *b == b'Z')
        .expect("the name is in the body");
    tampered.body[at] = b'X';
    judged(&tampered, false, Some("signature"), "a tampered body").await;
    let wrong = Case::of(first, &format!("whsec_{}", "ab".repeat(32)));
    judged(&wrong, false, Some("signature"), "a wrong secret").await;
    let mut other_id = Case::of(first, &secret);
    other_id.headers["webhook-id"] = json!("whd_00000000000000000000000000000000");
    judged(&other_id, false, Some("signature"), "another message id").await;

    // An old timestamp: a delivery attempted by a clock ten minutes behind, verified now.
    clock.set(Utc::now() - chrono::Duration::minutes(10));
    app.submit("standard", "name=late").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let requests = receiver.wait_for(4).await;
    let old = &requests[3];
    assert!(python_verifies(
        &old.body,
        header(old, "hymical-signature"),
        &secret
    ));
    judged(
        &Case::of(old, &secret),
        false,
        Some("too old"),
        "a ten-minute-old request",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_keeps_both_secrets_verifying_for_the_overlap_and_then_only_the_new_one() {
    let receiver = Receiver::start().await;
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let app = TestApp::start_with(DEV, clock.clone()).await;
    let (_, key) = app.create_key("rotation").await;
    let first = create_endpoint(&app, &key, "rotating", &receiver.url("/hook")).await;

    // Queued under the first secret, then the rotation (the default overlap: 24 h).
    app.submit("rotating", "queued=before").await;
    let rotated_at = clock.now();
    let (second, live) = rotate(&app, &key, "rotating", None).await;
    let until = (rotated_at + chrono::Duration::hours(24))
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    assert_eq!(
        live,
        json!([
            { "role": "CURRENT", "fingerprint": fingerprint(&second), "liveUntil": null },
            { "role": "PREVIOUS", "fingerprint": fingerprint(&first), "liveUntil": until },
        ])
    );
    app.submit("rotating", "queued=after").await;
    let worker = app.worker(None);
    while worker.run_once().await.unwrap() > 0 {}
    let requests = receiver.wait_for(2).await;
    let by_field = |needle: &str| {
        requests
            .iter()
            .find(|r| String::from_utf8_lossy(&r.body).contains(needle))
            .unwrap_or_else(|| panic!("no request with {needle}"))
            .clone()
    };
    let before = by_field("\"before\"");
    let after = by_field("\"after\"");

    // Hymical-Signature keeps the snapshot rule: the secret each was accepted under.
    assert!(python_verifies(
        &before.body,
        header(&before, "hymical-signature"),
        &first
    ));
    assert!(!python_verifies(
        &before.body,
        header(&before, "hymical-signature"),
        &second
    ));
    assert!(python_verifies(
        &after.body,
        header(&after, "hymical-signature"),
        &second
    ));
    assert!(!python_verifies(
        &after.body,
        header(&after, "hymical-signature"),
        &first
    ));
    // webhook-signature lists both: a receiver holding only the old secret, and one holding
    // only the new, both verify both requests.
    for request in [&before, &after] {
        assert_eq!(header(request, "webhook-signature").split(' ').count(), 2);
        for secret in [&first, &second] {
            judged(
                &Case::of(request, secret),
                true,
                None,
                "a request in the overlap",
            )
            .await;
        }
    }

    // A short overlap, then past it: only the newest secret verifies.
    let (third, live) = rotate(&app, &key, "rotating", Some(60)).await;
    assert_eq!(live.as_array().map(Vec::len), Some(2), "{live}");
    clock.advance(chrono::Duration::seconds(61));
    let secrets = app
        .gql(
            &key,
            "query { endpoint(id: \"rotating\") { webhookSecrets { role fingerprint } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        secrets["data"]["endpoint"]["webhookSecrets"],
        json!([{ "role": "CURRENT", "fingerprint": fingerprint(&third) }])
    );
    app.submit("rotating", "queued=expired").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let requests = receiver.wait_for(3).await;
    let expired = &requests[2];
    assert_eq!(header(expired, "webhook-signature").split(' ').count(), 1);
    judged(
        &Case::of(expired, &third),
        true,
        None,
        "the new secret after the window",
    )
    .await;
    judged(
        &Case::of(expired, &second),
        false,
        Some("signature"),
        "the old secret after the window",
    )
    .await;
    judged(
        &Case::of(expired, &first),
        false,
        Some("signature"),
        "the first secret",
    )
    .await;

    // Ending the overlap early is its own operation.
    let (fourth, _) = rotate(&app, &key, "rotating", None).await;
    let ended = app
        .gql(
            &key,
            "mutation { endWebhookSecretOverlap(endpointId: \"rotating\") { endpoint { webhookSecrets { role fingerprint } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        ended["data"]["endWebhookSecretOverlap"]["endpoint"]["webhookSecrets"],
        json!([{ "role": "CURRENT", "fingerprint": fingerprint(&fourth) }]),
        "{ended}"
    );
    app.submit("rotating", "queued=ended").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let requests = receiver.wait_for(4).await;
    let ended = &requests[3];
    let answers = verifiers::verify(
        Library::NodeStandard,
        vec![Case::of(ended, &fourth), Case::of(ended, &third)],
    )
    .await;
    assert!(answers[0].is_ok(), "{answers:?}");
    assert!(answers[1].is_err(), "{answers:?}");

    // Out-of-range overlaps are refused and change nothing.
    let refused = app
        .gql(
            &key,
            "mutation { rotateWebhookSecret(endpointId: \"rotating\", overlapSeconds: -1) { webhookSecret } }",
            json!({}),
        )
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "INVALID_INPUT",
        "{refused}"
    );
    assert_eq!(
        refused["errors"][0]["extensions"]["details"]["field"],
        "overlapSeconds"
    );
}

/// An operational webhook (an operator alert) is a Standard Webhook and nothing more:
/// received by a real receiver, it carries `webhook-id`, `webhook-timestamp` and a
/// `webhook-signature` that every library verifies with `FORMS_ALERT_WEBHOOK_SECRET`
/// (and refuses once tampered with), and no `Hymical-Signature`, whose HMAC of the body
/// alone, with no time in it, would let a captured alert be replayed.
#[tokio::test(flavor = "multi_thread")]
async fn an_operational_webhook_carries_the_standard_headers_alone_and_verifies() {
    use base64::Engine;
    let receiver = Receiver::start().await;
    let operators = Receiver::start().await;
    let alert_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([42u8; 32])
    );
    let alert_url = operators.url("/alerts");
    let vars = [
        ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_WEBHOOK_MAX_ATTEMPTS", "1"),
        ("FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES", "3"),
        ("FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES", "1"),
        ("FORMS_ALERT_WEBHOOK_URL", alert_url.as_str()),
        ("FORMS_ALERT_WEBHOOK_SECRET", alert_secret.as_str()),
    ];
    let app =
        TestApp::start_with(&vars, Arc::new(hymical_forms::testing::clock::SystemClock)).await;
    let (_, key) = app.create_key("alerts").await;
    create_endpoint(&app, &key, "alerting", &receiver.url("/failing")).await;
    app.submit("alerting", "n=1").await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    // The run is counted (and the alert owed) after the attempt is committed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while app
        .db
        .count("SELECT count(*) AS n FROM operator_alerts")
        .await
        < 1
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no alert was ever owed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    app.alert_sender().send_due().await;
    let alerts = operators.wait_for(1).await;
    assert_eq!(alerts.len(), 1);
    let alert = &alerts[0];
    let body: Value = serde_json::from_slice(&alert.body).unwrap();
    assert_eq!(body["type"], "destination.failing", "{body}");

    assert!(
        !alert.headers.contains_key("hymical-signature"),
        "an operational webhook carries Hymical-Signature: {:?}",
        alert.headers
    );
    assert!(header(alert, "webhook-id").starts_with("alert_"));
    let timestamp: i64 = header(alert, "webhook-timestamp").parse().unwrap();
    assert!(
        (Utc::now().timestamp() - timestamp).abs() < 60,
        "{timestamp}"
    );
    let signature = header(alert, "webhook-signature");
    assert!(
        signature.starts_with("v1,") && !signature.contains(' '),
        "{signature}"
    );
    judged(
        &Case::of(alert, &alert_secret),
        true,
        None,
        "an operator alert",
    )
    .await;
    let mut tampered = Case::of(alert, &alert_secret);
    let at = tampered
        .body
        .iter()
        .position(|b| *b == b'f')
        .expect("the type is in the body");
    tampered.body[at] = b'F';
    judged(&tampered, false, Some("signature"), "a tampered alert").await;
}
