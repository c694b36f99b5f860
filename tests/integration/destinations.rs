//! Destinations: one form delivered to several webhooks and email address lists through
//! the same outbox, each delivery with its own state, history, schedule and replay
//! (docs/delivery.md, "Destinations"); email over a real SMTP server on loopback
//! (tests/smtp-server/serve.py).

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use hymical_forms::testing::clock::{ManualClock, SystemClock};
use serde_json::{json, Value};

use support::harness::{data, TestApp};
use support::receiver::Receiver;
use support::smtp_server::SmtpServer;

/// Loopback receivers and mail server: the development flag, no rate limits, and the
/// mail server of `smtp` (plaintext: it is on loopback).
fn vars(smtp: &SmtpServer) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true".into()),
        ("FORMS_RATE_LIMIT_ENABLED", "false".into()),
    ];
    vars.extend(smtp.vars());
    vars
}

async fn app_with(
    smtp: &SmtpServer,
    clock: Arc<dyn hymical_forms::testing::clock::Clock>,
) -> TestApp {
    let owned = vars(smtp);
    let pairs: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestApp::start_with(&pairs, clock).await
}

/// An endpoint whose first webhook goes to `url`; answers nothing (the secret is not
/// needed here).
async fn create_endpoint(app: &TestApp, key: &str, id: &str, url: &str) {
    data(
        app.gql(
            key,
            "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }",
            json!({ "input": { "id": id, "name": "Contact form", "webhookUrl": url } }),
        )
        .await,
    );
}

async fn add_webhook(app: &TestApp, key: &str, endpoint: &str, url: &str) -> String {
    let answer = data(
        app.gql(
            key,
            "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id position kind } webhookSecret } }",
            json!({ "input": { "endpointId": endpoint, "url": url } }),
        )
        .await,
    );
    let destination = &answer["addWebhookDestination"]["destination"];
    assert_eq!(destination["kind"], "WEBHOOK");
    assert!(answer["addWebhookDestination"]["webhookSecret"]
        .as_str()
        .unwrap()
        .starts_with("whsec_"));
    destination["id"].as_str().unwrap().to_string()
}

async fn add_email(app: &TestApp, key: &str, endpoint: &str, recipients: &[&str]) -> String {
    let answer = data(
        app.gql(
            key,
            "mutation($input: AddEmailDestinationInput!) { addEmailDestination(input: $input) { destination { id kind recipients replyToField } } }",
            json!({ "input": { "endpointId": endpoint, "recipients": recipients } }),
        )
        .await,
    );
    let destination = &answer["addEmailDestination"]["destination"];
    assert_eq!(destination["kind"], "EMAIL");
    assert_eq!(destination["recipients"], json!(recipients));
    assert_eq!(destination["replyToField"], "email", "the default");
    destination["id"].as_str().unwrap().to_string()
}

/// The endpoint `mail`, whose one destination emails owner@example.com.
async fn mail_endpoint(app: &TestApp, key: &str) {
    data(
        app.gql(
            key,
            "mutation { createEndpoint(input: { id: \"mail\", name: \"Mail\" }) { endpoint { id } } }",
            json!({}),
        )
        .await,
    );
    add_email(app, key, "mail", &["owner@example.com"]).await;
}

/// A submission's deliveries as the API shows them, in destination order.
async fn deliveries_of(app: &TestApp, key: &str, submission: &str) -> Vec<Value> {
    let answer = data(
        app.gql(
            key,
            "query($id: ID!) { submission(id: $id) { delivery { id } deliveries { id state attempts destinationUrl destination { id kind position } attemptHistory { number outcome httpStatus smtpReplyCode smtpReply } } } }",
            json!({ "id": submission }),
        )
        .await,
    );
    let submission = &answer["submission"];
    let deliveries = submission["deliveries"].as_array().unwrap().clone();
    assert_eq!(
        submission["delivery"]["id"], deliveries[0]["id"],
        "`delivery` is the first destination's"
    );
    deliveries
}

fn header<'a>(message: &'a Value, name: &str) -> Option<&'a str> {
    message["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|pair| pair[1].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_with_two_webhooks_and_an_email_delivers_each_on_its_own() {
    let down = Receiver::start().await;
    let up = Receiver::start().await;
    let smtp = SmtpServer::start(&[]);
    let app = app_with(&smtp, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("destinations").await;

    // The first webhook answers 400 (final); the second and the email work.
    create_endpoint(&app, &key, "contact", &down.url("/status/400")).await;
    let second = add_webhook(&app, &key, "contact", &up.url("/hook")).await;
    let email = add_email(
        &app,
        &key,
        "contact",
        &["owner@example.com", "desk@example.net"],
    )
    .await;
    let listed = data(
        app.gql(
            &key,
            "{ endpoint(id: \"contact\") { webhookUrl destinations { id kind position url recipients state } } }",
            json!({}),
        )
        .await,
    );
    let destinations = listed["endpoint"]["destinations"].as_array().unwrap();
    assert_eq!(destinations.len(), 3);
    assert_eq!(
        listed["endpoint"]["webhookUrl"],
        down.url("/status/400"),
        "webhookUrl is the first webhook destination's"
    );
    let first = destinations[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        destinations
            .iter()
            .map(|d| d["position"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );

    let submission = app
        .submit(
            "contact",
            "email=visitor%40example.org&message=%3Cb%3Ehi%3C%2Fb%3E",
        )
        .await;
    let worker = app.worker(None);
    assert_eq!(
        worker.run_once().await.unwrap(),
        3,
        "one delivery per destination"
    );

    let deliveries = deliveries_of(&app, &key, &submission).await;
    let by_destination = |id: &str| {
        deliveries
            .iter()
            .find(|d| d["destination"]["id"] == id)
            .unwrap()
            .clone()
    };
    let (failed, delivered, emailed) = (
        by_destination(&first),
        by_destination(&second),
        by_destination(&email),
    );
    assert_eq!(failed["state"], "FAILED");
    assert_eq!(failed["attemptHistory"][0]["httpStatus"], 400);
    assert_eq!(
        delivered["state"], "DELIVERED",
        "one receiver down holds no other"
    );
    assert_eq!(emailed["state"], "DELIVERED");
    assert_eq!(emailed["destination"]["kind"], "EMAIL");
    assert_eq!(
        emailed["destinationUrl"],
        "mailto:owner@example.com,desk@example.net"
    );
    let attempt = &emailed["attemptHistory"][0];
    assert_eq!(attempt["outcome"], "SUCCEEDED");
    assert_eq!(attempt["smtpReplyCode"], 250);
    assert_eq!(attempt["httpStatus"], Value::Null);
    assert!(
        attempt["smtpReply"].as_str().unwrap().contains("accepted"),
        "{attempt}"
    );
    assert_eq!(up.received().len(), 1);

    // The email: to both recipients, Reply-To the submitter, a Message-ID of the delivery,
    // the field escaped in the HTML part.
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(
        message["rcpt_tos"],
        json!(["owner@example.com", "desk@example.net"])
    );
    assert_eq!(header(message, "Reply-To"), Some("visitor@example.org"));
    let delivery_id = emailed["id"].as_str().unwrap();
    assert!(
        header(message, "Message-ID").unwrap().contains(delivery_id),
        "{message}"
    );
    assert_eq!(
        header(message, "Subject"),
        Some("New submission to Contact form")
    );
    let html = message["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|part| part["content_type"] == "text/html")
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        html.contains("&lt;b&gt;hi&lt;/b&gt;") && !html.contains("<b>hi</b>"),
        "{html}"
    );

    // Replaying the failed delivery after its destination moved touches no other: each
    // delivery's history, replay and events are its own.
    data(
        app.gql(
            &key,
            "mutation($input: UpdateDestinationInput!) { updateDestination(input: $input) { destination { url } webhookSecret } }",
            json!({ "input": { "id": first, "url": down.url("/ok") } }),
        )
        .await,
    );
    let replayed = data(
        app.gql(
            &key,
            "mutation($id: ID!) { replayDelivery(id: $id, destination: CURRENT) { delivery { state destinationUrl } } }",
            json!({ "id": failed["id"] }),
        )
        .await,
    );
    assert_eq!(
        replayed["replayDelivery"]["delivery"]["destinationUrl"],
        down.url("/ok")
    );
    assert_eq!(worker.run_once().await.unwrap(), 1, "only the replayed one");
    let after = deliveries_of(&app, &key, &submission).await;
    let attempts: Vec<(String, usize)> = after
        .iter()
        .map(|d| {
            (
                d["state"].as_str().unwrap().to_string(),
                d["attemptHistory"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            ("DELIVERED".to_string(), 2),
            ("DELIVERED".to_string(), 1),
            ("DELIVERED".to_string(), 1)
        ]
    );
    assert_eq!(smtp.messages().len(), 1, "the email was not sent again");
    assert_eq!(up.received().len(), 1);
    let replay_events = app
        .db
        .count(&format!(
            "SELECT count(*) AS n FROM delivery_events WHERE kind = 'replayed' AND delivery_id <> '{}'",
            failed["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(replay_events, 0);

    // Listing and bulk replay by destination.
    let listed = data(
        app.gql(
            &key,
            "query($d: ID!) { deliveries(filter: { destinationId: $d }) { nodes { id destination { id } } } }",
            json!({ "d": email }),
        )
        .await,
    );
    let nodes = listed["deliveries"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["id"], emailed["id"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn smtp_451_then_250_gives_two_attempts_and_one_message() {
    let smtp = SmtpServer::start(&["--script", "451,250"]);
    let start = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = app_with(&smtp, clock.clone()).await;
    let (_, key) = app.create_key("email").await;
    mail_endpoint(&app, &key).await;
    let submission = app.submit("mail", "message=hello").await;
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let deliveries = deliveries_of(&app, &key, &submission).await;
    assert_eq!(deliveries[0]["state"], "PENDING", "4xx is retried");
    let attempt = &deliveries[0]["attemptHistory"][0];
    assert_eq!(attempt["outcome"], "SMTP_ERROR");
    assert_eq!(attempt["smtpReplyCode"], 451);
    assert!(attempt["smtpReply"]
        .as_str()
        .unwrap()
        .contains("try again later"));
    assert!(smtp.messages().is_empty());

    // On the schedule (10 s by default), the second attempt is accepted.
    clock.set(start + chrono::Duration::seconds(10));
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let deliveries = deliveries_of(&app, &key, &submission).await;
    assert_eq!(deliveries[0]["state"], "DELIVERED");
    assert_eq!(deliveries[0]["attemptHistory"].as_array().unwrap().len(), 2);
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "two attempts, one message");
}

#[tokio::test(flavor = "multi_thread")]
async fn smtp_550_fails_the_delivery_with_the_reply_recorded() {
    let smtp = SmtpServer::start(&["--script", "550"]);
    let app = app_with(&smtp, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("email").await;
    mail_endpoint(&app, &key).await;
    let submission = app.submit("mail", "message=hello").await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let deliveries = deliveries_of(&app, &key, &submission).await;
    assert_eq!(deliveries[0]["state"], "FAILED", "5xx is final");
    let attempt = &deliveries[0]["attemptHistory"][0];
    assert_eq!(attempt["outcome"], "SMTP_ERROR");
    assert_eq!(attempt["smtpReplyCode"], 550);
    assert!(
        attempt["smtpReply"]
            .as_str()
            .unwrap()
            .contains("Scripted rejection"),
        "{attempt}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mail_server_that_never_answers_ends_the_attempt_within_the_timeout() {
    let smtp = SmtpServer::start(&["--hang", "data"]);
    let app = app_with(&smtp, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("email").await;
    mail_endpoint(&app, &key).await;
    let submission = app.submit("mail", "message=hello").await;
    let started = std::time::Instant::now();
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    // FORMS_SMTP_TIMEOUT_SECONDS is 3: the attempt ends then, well before a generous bound.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let deliveries = deliveries_of(&app, &key, &submission).await;
    assert_eq!(deliveries[0]["state"], "PENDING", "a timeout is retried");
    assert_eq!(deliveries[0]["attemptHistory"][0]["outcome"], "TIMEOUT");
}

#[tokio::test(flavor = "multi_thread")]
async fn destination_mutations_refuse_bad_input_and_store_nothing() {
    let smtp = SmtpServer::start(&[]);
    let app = app_with(&smtp, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("destinations").await;
    app.create_contact_endpoint(&key).await;
    let code = |answer: &Value| {
        answer["errors"][0]["extensions"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let add_email_mutation = "mutation($input: AddEmailDestinationInput!) { addEmailDestination(input: $input) { destination { id } } }";
    for recipients in [
        json!([]),
        json!(["not an address"]),
        json!(["a@example.com\r\nBcc: b@example.com"]),
        json!(["a@example.com, b@example.com"]),
        json!(["Owner <owner@example.com>"]),
    ] {
        let answer = app
            .gql(
                &key,
                add_email_mutation,
                json!({ "input": { "endpointId": "contact", "recipients": recipients } }),
            )
            .await;
        assert_eq!(code(&answer), "INVALID_INPUT", "{recipients}: {answer}");
        assert_eq!(
            answer["errors"][0]["extensions"]["details"]["field"],
            "recipients"
        );
    }
    let answer = app
        .gql(
            &key,
            add_email_mutation,
            json!({ "input": { "endpointId": "nowhere", "recipients": ["a@example.com"] } }),
        )
        .await;
    assert_eq!(code(&answer), "ENDPOINT_NOT_FOUND");
    let answer = app
        .gql(
            &key,
            "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id } } }",
            json!({ "input": { "endpointId": "contact", "url": "ftp://example.com/x" } }),
        )
        .await;
    assert_eq!(code(&answer), "INVALID_WEBHOOK_URL");
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM destinations").await,
        0
    );

    // An email destination has no secret to rotate; an unknown id is not found.
    let email = add_email(&app, &key, "contact", &["owner@example.com"]).await;
    let answer = app
        .gql(
            &key,
            "mutation($id: ID!) { rotateDestinationSecret(id: $id) { webhookSecret } }",
            json!({ "id": email }),
        )
        .await;
    assert_eq!(code(&answer), "DESTINATION_NOT_WEBHOOK");
    let answer = app
        .gql(
            &key,
            "mutation { pauseDestination(id: \"dst_00000000000000000000000000000000\") { destination { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(code(&answer), "DESTINATION_NOT_FOUND");

    // A change is stored whole: the Reply-To field, then none; a bad field name is
    // refused and changes nothing.
    let update = "mutation($input: UpdateDestinationInput!) { updateDestination(input: $input) { destination { replyToField recipients } } }";
    let changed = data(
        app.gql(
            &key,
            update,
            json!({ "input": { "id": email, "replyToField": "contact_email", "recipients": ["desk@example.com"] } }),
        )
        .await,
    );
    assert_eq!(
        changed["updateDestination"]["destination"],
        json!({ "replyToField": "contact_email", "recipients": ["desk@example.com"] })
    );
    let answer = app
        .gql(
            &key,
            update,
            json!({ "input": { "id": email, "replyToField": "bad\nname" } }),
        )
        .await;
    assert_eq!(code(&answer), "INVALID_INPUT");
    let stored = app
        .db
        .count(&format!(
            "SELECT count(*) AS n FROM destinations WHERE id = '{email}' AND reply_to_field = 'contact_email'"
        ))
        .await;
    assert_eq!(stored, 1);
    let cleared = data(
        app.gql(
            &key,
            update,
            json!({ "input": { "id": email, "replyToField": null } }),
        )
        .await,
    );
    assert_eq!(
        cleared["updateDestination"]["destination"]["replyToField"],
        Value::Null
    );

    // Past 20 destinations: refused, nothing stored.
    for _ in 1..20 {
        add_email(&app, &key, "contact", &["owner@example.com"]).await;
    }
    let answer = app
        .gql(
            &key,
            add_email_mutation,
            json!({ "input": { "endpointId": "contact", "recipients": ["x@example.com"] } }),
        )
        .await;
    assert_eq!(code(&answer), "DESTINATION_LIMIT_REACHED");
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM destinations").await,
        20
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_or_paused_destination_gets_nothing_and_the_others_go_on() {
    let first = Receiver::start().await;
    let second = Receiver::start().await;
    let smtp = SmtpServer::start(&[]);
    let app = app_with(&smtp, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("destinations").await;
    create_endpoint(&app, &key, "contact", &first.url("/a")).await;
    let second_id = add_webhook(&app, &key, "contact", &second.url("/b")).await;

    // Paused: its deliveries are queued, unattempted; the first webhook goes on.
    let paused = data(
        app.gql(
            &key,
            "mutation($id: ID!) { pauseDestination(id: $id) { destination { state pauseReason } } }",
            json!({ "id": second_id }),
        )
        .await,
    );
    assert_eq!(paused["pauseDestination"]["destination"]["state"], "PAUSED");
    assert_eq!(
        paused["pauseDestination"]["destination"]["pauseReason"],
        "OPERATOR"
    );
    let submission = app.submit("contact", "a=1").await;
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!(first.received().len(), 1);
    assert!(second.received().is_empty());
    let state = data(
        app.gql(
            &key,
            "{ endpoint(id: \"contact\") { deliveryState } }",
            json!({}),
        )
        .await,
    );
    assert_eq!(
        state["endpoint"]["deliveryState"], "RUNNING",
        "one destination runs"
    );
    let resumed = data(
        app.gql(
            &key,
            "mutation($id: ID!) { resumeDestination(id: $id) { heldDeliveries destination { state } } }",
            json!({ "id": second_id }),
        )
        .await,
    );
    assert_eq!(resumed["resumeDestination"]["heldDeliveries"], 1);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!(second.received().len(), 1);
    let events = app
        .db
        .count(&format!(
            "SELECT count(*) AS n FROM endpoint_events WHERE destination_id = '{second_id}' AND kind IN ('paused', 'resumed')"
        ))
        .await;
    assert_eq!(
        events, 2,
        "the destination's pause and resume are events naming it"
    );

    // Removed: submissions from then on make no delivery for it; its history stays.
    let removed = data(
        app.gql(
            &key,
            "mutation($id: ID!) { removeDestination(id: $id) { destination { state removedAt } cancelledDeliveries } }",
            json!({ "id": second_id }),
        )
        .await,
    );
    assert_eq!(
        removed["removeDestination"]["destination"]["state"],
        "REMOVED"
    );
    app.submit("contact", "a=2").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!((first.received().len(), second.received().len()), (2, 1));
    let deliveries = deliveries_of(&app, &key, &submission).await;
    assert_eq!(
        deliveries.len(),
        2,
        "the earlier submission keeps both deliveries"
    );
    assert_eq!(deliveries[1]["destination"]["id"], second_id.as_str());
}

/// A receiver answering 500: one warning when the run of failed deliveries reaches the
/// warning threshold, one notice when the destination pauses, one when it resumes, each
/// by email to the operators and as an operational webhook signed with the Standard
/// Webhooks headers alone (no `Hymical-Signature`); never one per failure,
/// and once however many senders look at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_receiver_yields_one_warning_one_pause_and_one_resume_notice() {
    use base64::Engine;
    use hmac::Mac;
    let receiver = Receiver::start().await;
    let operators = Receiver::start().await;
    let smtp = SmtpServer::start(&[]);
    let alert_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    );
    let mut owned = vars(&smtp);
    owned.extend([
        ("FORMS_WEBHOOK_MAX_ATTEMPTS", "1".to_string()),
        ("FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES", "4".into()),
        ("FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES", "2".into()),
        (
            "FORMS_ALERT_EMAILS",
            "ops@example.com, oncall@example.com".into(),
        ),
        ("FORMS_ALERT_WEBHOOK_URL", operators.url("/alerts")),
        ("FORMS_ALERT_WEBHOOK_SECRET", alert_secret.clone()),
    ]);
    let pairs: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let app = TestApp::start_with(&pairs, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("alerts").await;
    create_endpoint(&app, &key, "contact", &receiver.url("/failing")).await;
    let worker = app.worker(None);
    let senders = [app.alert_sender(), app.alert_sender()];

    // Six failures one after another: a warning at the second, the pause at the fourth;
    // what comes after is held, and no failure after the warning warns again.
    let paused = "SELECT count(*) AS n FROM destinations WHERE paused_at IS NOT NULL";
    for n in 0..6 {
        app.submit("contact", &format!("n={n}")).await;
        worker.run_once().await.unwrap();
        // The run is counted (and the pause made) after the attempt is committed.
        let failed = app
            .db
            .count("SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'failed'")
            .await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while app
            .db
            .count("SELECT coalesce(max(consecutive_failed_deliveries), 0)::bigint AS n FROM destinations")
            .await
            < failed.min(4)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the run was never counted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // Both senders look after every failure, at once.
        futures_util::future::join(senders[0].send_due(), senders[1].send_due()).await;
    }
    assert_eq!(app.db.count(paused).await, 1);
    assert_eq!(receiver.received().len(), 4, "nothing sent while paused");

    let kinds = |messages: &[Value]| -> Vec<String> {
        messages
            .iter()
            .map(|m| header(m, "Subject").unwrap().to_string())
            .collect()
    };
    let emails = smtp.messages();
    assert_eq!(
        kinds(&emails),
        [
            "Deliveries of endpoint contact are failing",
            "Deliveries of endpoint contact are paused"
        ]
    );
    assert_eq!(
        emails[0]["rcpt_tos"],
        json!(["ops@example.com", "oncall@example.com"])
    );
    let hooks = operators.received();
    let types = |hooks: &[support::receiver::Received]| -> Vec<String> {
        hooks
            .iter()
            .map(|h| {
                let body: Value = serde_json::from_slice(&h.body).unwrap();
                body["type"].as_str().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(types(&hooks), ["destination.failing", "destination.paused"]);
    // Signed as Standard Webhooks say, with the configured key, and by nothing else: no
    // `Hymical-Signature` (an HMAC of the body alone, with no time in it, would let a
    // captured alert be replayed to a receiver trusting that header).
    for hook in &hooks {
        assert!(
            !hook.headers.contains_key("hymical-signature"),
            "an operational webhook carries Hymical-Signature: {:?}",
            hook.headers
        );
        let id = hook.headers["webhook-id"].to_str().unwrap();
        let timestamp = hook.headers["webhook-timestamp"].to_str().unwrap();
        let key = base64::engine::general_purpose::STANDARD
            .decode(alert_secret.trim_start_matches("whsec_"))
            .unwrap();
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(&hook.body);
        let expected = format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(
            hook.headers["webhook-signature"].to_str().unwrap(),
            expected
        );
        assert!(id.starts_with("alert_"), "{id}");
    }
    let paused_body: Value = serde_json::from_slice(&hooks[1].body).unwrap();
    assert_eq!(paused_body["data"]["endpoint_id"], "contact");
    assert_eq!(paused_body["data"]["reason"], "failure_threshold");
    assert_eq!(paused_body["data"]["consecutive_failed_deliveries"], 4);

    // The receiver recovers and the operator resumes: one notice; the held deliveries
    // go out and nothing more is announced.
    receiver
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    data(
        app.gql(
            &key,
            "mutation { resumeEndpoint(endpointId: \"contact\") { endpoint { id } } }",
            json!({}),
        )
        .await,
    );
    worker.run_once().await.unwrap();
    futures_util::future::join(senders[0].send_due(), senders[1].send_due()).await;
    futures_util::future::join(senders[0].send_due(), senders[1].send_due()).await;
    assert_eq!(receiver.received().len(), 6);
    assert_eq!(
        kinds(&smtp.messages())[2..],
        ["Deliveries of endpoint contact are resumed"]
    );
    assert_eq!(types(&operators.received())[2..], ["destination.resumed"]);
    // The same events in the API: the warning among the endpoint's events.
    let events = app
        .db
        .count("SELECT count(*) AS n FROM endpoint_events WHERE kind = 'failing'")
        .await;
    assert_eq!(events, 1);
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM operator_alerts WHERE next_attempt_at IS NOT NULL")
            .await,
        0,
        "every alert is done"
    );
}

/// Throttling across processes: two servers drain 500 deliveries to one destination
/// limited to 50 requests a second. A receiver logging arrivals sees no 1 s window with
/// more than the rate plus the allowed burst (100 ms of the rate, and the one request the
/// limit admits at its edge) and two requests of tolerance for when the receiver saw
/// them, and the whole drain takes at least as long as the rate asks (less 5 % for
/// the receiver's view of the first and last arrivals); every delivery is delivered with
/// one attempt (waiting for its turn spent none).
#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_destination_gets_no_more_than_its_rate_across_two_servers() {
    use support::harness::{wait_for_status, ServeProcess};
    const RATE: usize = 50;
    const DELIVERIES: usize = 500;
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    let (_, key) = app.create_key("throttle").await;
    create_endpoint(&app, &key, "busy", &receiver.url("/hook")).await;
    let listed = data(
        app.gql(
            &key,
            "{ endpoint(id: \"busy\") { destinations { id } } }",
            json!({}),
        )
        .await,
    );
    let destination = listed["endpoint"]["destinations"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let updated = data(
        app.gql(
            &key,
            "mutation($input: UpdateDestinationInput!) { updateDestination(input: $input) { destination { maxRequestsPerSecond maxInFlight } } }",
            json!({ "input": { "id": destination, "maxRequestsPerSecond": RATE, "maxInFlight": 100 } }),
        )
        .await,
    );
    assert_eq!(
        updated["updateDestination"]["destination"]["maxRequestsPerSecond"],
        RATE
    );
    // Everything queued first, held by a pause, then released at once.
    data(
        app.gql(
            &key,
            "mutation($id: ID!) { pauseDestination(id: $id) { destination { state } } }",
            json!({ "id": destination }),
        )
        .await,
    );
    let mut conn = app.db.connect().await;
    {
        use diesel_async::RunQueryDsl;
        diesel::sql_query(format!(
            "WITH s AS (
                 INSERT INTO submissions (id, endpoint_id, received_at, fields)
                 SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'busy', now(), '{{\"n\":[\"1\"]}}'
                 FROM generate_series(1, {DELIVERIES}) AS n
                 RETURNING id)
             INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_id,
                 destination_url, signing_secret, next_attempt_at, created_at)
             SELECT 'whd_' || substr(s.id, 5), s.id, ds.endpoint_id, ds.id, ds.url, ds.secret,
                    now(), now()
             FROM s, destinations ds WHERE ds.id = '{destination}'"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let vars = [
        ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_WORKER_POLL_SECONDS", "0.05"),
        ("FORMS_WORKER_CONCURRENCY", "64"),
    ];
    let servers = [
        ServeProcess::start(&app.db, &vars),
        ServeProcess::start(&app.db, &vars),
    ];
    for server in &servers {
        wait_for_status(&server.url("/health"), 200).await;
    }
    data(
        app.gql(
            &key,
            "mutation($id: ID!) { resumeDestination(id: $id) { heldDeliveries } }",
            json!({ "id": destination }),
        )
        .await,
    );
    receiver.wait_for(DELIVERIES).await;
    // When each request was started, as its worker recorded it: the throttle decides
    // starts, and a loaded machine can hold arrivals back and hand them over together.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while app
        .db
        .count("SELECT count(*) AS n FROM delivery_attempts")
        .await
        < DELIVERIES as i64
    {
        assert!(
            std::time::Instant::now() < deadline,
            "attempts never all recorded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let arrivals: Vec<f64> = {
        #[derive(diesel::QueryableByName)]
        struct Started {
            #[diesel(sql_type = diesel::sql_types::Double)]
            at: f64,
        }
        use diesel_async::RunQueryDsl;
        diesel::sql_query(
            "SELECT extract(epoch FROM attempted_at)::float8 AS at
             FROM delivery_attempts ORDER BY attempted_at",
        )
        .load::<Started>(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.at)
        .collect()
    };
    // The most requests in any window of one second.
    let mut busiest = 0;
    for (start, first) in arrivals.iter().enumerate() {
        let within = arrivals[start..]
            .iter()
            .take_while(|at| *at - *first < 1.0)
            .count();
        busiest = busiest.max(within);
    }
    let burst = RATE / 10;
    let span = std::time::Duration::from_secs_f64(arrivals[DELIVERIES - 1] - arrivals[0]);
    eprintln!("throttle: busiest second {busiest}, {DELIVERIES} in {span:?} at {RATE}/s");
    assert!(
        busiest <= RATE + burst + 3,
        "{busiest} requests within one second at a rate of {RATE}/s"
    );
    // After the first burst one request per 1/RATE s; 5 % of tolerance for the clocks of
    // two processes.
    let least =
        std::time::Duration::from_secs_f64(0.95 * (DELIVERIES - burst - 1) as f64 / RATE as f64);
    assert!(span >= least, "{DELIVERIES} started within {span:?}");

    let one_attempt_each = app
        .db
        .count(
            "SELECT count(*) AS n FROM webhook_deliveries
             WHERE state = 'delivered' AND attempts = 1",
        )
        .await;
    assert_eq!(one_attempt_each, DELIVERIES as i64);
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM delivery_attempts")
            .await,
        DELIVERIES as i64,
        "no attempt spent waiting"
    );
    // Both stop cleanly.
    for server in servers {
        let (status, log) = server.stop();
        assert!(status.success(), "{log}");
    }
}

/// The autoresponder: the operator's fixed confirmation, sent once to the one address the
/// submission names, never to a second address smuggled through a line break, a comma, a
/// display name or a second value, once per address per window, and never for what the
/// honeypot caught.
#[tokio::test(flavor = "multi_thread")]
async fn the_autoresponder_answers_one_address_once_per_window() {
    let smtp = SmtpServer::start(&[]);
    let start = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = app_with(&smtp, clock.clone()).await;
    let (_, key) = app.create_key("autoresponder").await;
    data(
        app.gql(
            &key,
            "mutation { createEndpoint(input: { id: \"contact\", name: \"Contact\", honeypotField: \"fax\" }) { endpoint { id } } }",
            json!({}),
        )
        .await,
    );
    let added = data(
        app.gql(
            &key,
            "mutation($input: AddAutoresponderDestinationInput!) { addAutoresponderDestination(input: $input) { destination { id kind replyToField replySubject replyBody replyWindowSeconds } } }",
            json!({ "input": {
                "endpointId": "contact",
                "subject": "Thank you for writing",
                "body": "We have your message and will answer within two days.\r\n\r\nThe team",
                "windowSeconds": 3600,
            } }),
        )
        .await,
    );
    let destination = &added["addAutoresponderDestination"]["destination"];
    assert_eq!(destination["kind"], "AUTORESPONDER");
    assert_eq!(destination["replyToField"], "email", "the default field");
    assert_eq!(
        destination["replyBody"],
        "We have your message and will answer within two days.\n\nThe team"
    );
    let autoresponder = destination["id"].as_str().unwrap().to_string();
    let worker = app.worker(None);
    let owed_query = format!(
        "SELECT count(*) AS n FROM webhook_deliveries WHERE destination_id = '{autoresponder}'"
    );
    let owed = async |app: &TestApp| app.db.count(&owed_query).await;

    // One plain address: one message, to it alone, with the operator's words only.
    app.submit(
        "contact",
        "email=visitor%40example.org&subject=Bcc%3A+x%40evil.example&message=hello",
    )
    .await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(message["rcpt_tos"], json!(["visitor@example.org"]));
    assert_eq!(header(message, "Subject"), Some("Thank you for writing"));
    assert_eq!(header(message, "To"), Some("visitor@example.org"));
    assert_eq!(header(message, "Reply-To"), None);
    assert_eq!(header(message, "Bcc"), None);
    let raw = message["raw"].as_str().unwrap();
    assert!(
        !raw.contains("evil.example") && !raw.contains("hello"),
        "{raw}"
    );
    assert!(raw.contains("within two days"), "{raw}");

    // The same address again within the window, in other letters: nothing more.
    app.submit("contact", "email=Visitor%40Example.ORG").await;
    assert_eq!(owed(&app).await, 1);

    // A second address smuggled in any way: no confirmation at all, to anyone.
    for smuggled in [
        "email=a%40example.org%0ABcc%3A+b%40example.org",
        "email=a%40example.org%0D%0Ab%40example.org",
        "email=a%40example.org%2C+b%40example.org",
        "email=a%40example.org%3Bb%40example.org",
        "email=Someone+%3Ca%40example.org%3E",
        "email=a%40example.org&email=b%40example.org",
        "email=",
        "name=no+address",
    ] {
        app.submit("contact", smuggled).await;
        assert_eq!(owed(&app).await, 1, "{smuggled}");
    }
    // The honeypot's catch is stored nowhere and answered by nobody.
    let caught = app
        .post_form(
            "contact",
            Some("application/x-www-form-urlencoded"),
            "email=trap%40example.org&fax=1".to_string(),
            &[],
        )
        .await;
    assert!(caught.status().is_success());
    assert_eq!(owed(&app).await, 1);

    // Past the window, the address is answered again, once for two submissions.
    clock.advance(chrono::Duration::seconds(3601));
    let answered = app.submit("contact", "email=visitor%40example.org").await;
    app.submit("contact", "email=visitor%40example.org").await;
    assert_eq!(owed(&app).await, 2);
    worker.run_once().await.unwrap();
    let recipients: Vec<Value> = smtp
        .messages()
        .iter()
        .map(|m| m["rcpt_tos"].clone())
        .collect();
    assert_eq!(
        recipients,
        [
            json!(["visitor@example.org"]),
            json!(["visitor@example.org"])
        ]
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM autoresponder_recipients")
            .await,
        1,
        "one row per address, the address itself not kept"
    );
    // Erasing the answered submission erases that row too.
    data(
        app.gql(
            &key,
            "mutation($id: ID!) { deleteSubmission(id: $id) { deletedSubmissionId } }",
            json!({ "id": answered }),
        )
        .await,
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM autoresponder_recipients")
            .await,
        0
    );
}

/// `deliveryStateChanged(destinationId)`: a dashboard watching one destination sees its
/// deliveries' changes and nothing of the endpoint's other destinations.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_by_destination_sees_that_destination_only() {
    use support::ws_client::WsClient;
    let first = Receiver::start().await;
    let second = Receiver::start().await;
    let smtp = SmtpServer::start(&[]);
    let app = app_with(&smtp, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("watch").await;
    create_endpoint(&app, &key, "contact", &first.url("/hook")).await;
    let watched = add_webhook(&app, &key, "contact", &second.url("/hook")).await;
    let mut client = WsClient::ready(&format!("ws://{}/graphql/ws", app.addr), &key).await;
    client
        .send(json!({
            "type": "subscribe",
            "id": "one",
            "payload": {
                "query": "subscription($d: ID) { deliveryStateChanged(destinationId: $d, afterEventId: \"0\") { kind state delivery { destination { id } } } }",
                "variables": { "d": watched },
            },
        }))
        .await;
    app.submit("contact", "n=1").await;
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 2);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let message = client.next_json().await;
        assert_eq!(message["type"], "next", "{message}");
        let event = &message["payload"]["data"]["deliveryStateChanged"];
        assert_eq!(
            event["delivery"]["destination"]["id"],
            watched.as_str(),
            "{event}"
        );
        seen.push(event["state"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["PENDING", "PROCESSING", "DELIVERED"]);
    client
        .quiet_for(std::time::Duration::from_millis(300))
        .await;
    assert_eq!(
        first.received().len(),
        1,
        "the other destination was delivered to"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_email_destination_sends_its_own_subject_and_text() {
    let smtp = SmtpServer::start(&[]);
    let app = app_with(&smtp, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("destinations").await;
    data(
        app.gql(
            &key,
            "mutation { createEndpoint(input: { id: \"mail\", name: \"Mail\" }) { endpoint { id } } }",
            json!({}),
        )
        .await,
    );
    let add = "mutation($input: AddEmailDestinationInput!) { addEmailDestination(input: $input) { destination { id emailTemplate { subject text } } } }";
    // Refused where it breaks, and nothing stored.
    let refused = app
        .gql(
            &key,
            add,
            json!({ "input": { "endpointId": "mail", "recipients": ["owner@example.com"],
                "emailTemplate": { "text": "Hello\n{% if %}" } } }),
        )
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["details"]["field"], "emailTemplate.text",
        "{refused}"
    );
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("line 2"),
        "{refused}"
    );
    let added = data(
        app.gql(
            &key,
            add,
            json!({ "input": { "endpointId": "mail", "recipients": ["owner@example.com"],
                "emailTemplate": { "subject": "Lead: {{ values.name }}",
                                   "text": "From {{ values.email }}:\n{{ values.message }}\n{{ values.company }}" } } }),
        )
        .await,
    );
    assert_eq!(
        added["addEmailDestination"]["destination"]["emailTemplate"]["subject"],
        "Lead: {{ values.name }}"
    );
    // A name that tries to start a header of its own.
    app.submit(
        "mail",
        "name=Ann%0D%0ABcc%3A+x%40example.org&email=ann%40example.org&message=%3Cb%3Ehi%3C%2Fb%3E",
    )
    .await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(message["rcpt_tos"], json!(["owner@example.com"]), "no Bcc");
    assert_eq!(
        header(message, "Subject"),
        Some("Lead: Ann  Bcc: x@example.org")
    );
    let part = |kind: &str| {
        message["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|part| part["content_type"] == kind)
            .unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let text = part("text/plain");
    assert!(
        text.contains("From ann@example.org:") && text.contains("<b>hi</b>"),
        "{text}"
    );
    assert!(part("text/html").contains("&lt;b&gt;hi&lt;/b&gt;"));
}
