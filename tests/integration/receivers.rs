//! Receivers as they are (docs/delivery.md, "Receivers"): a destination's own headers, its
//! Basic or bearer authentication and its own retry schedule, set through GraphQL, sent to
//! a loopback receiver that checks each one and answers 401 otherwise; bad settings
//! refused with nothing stored.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use chrono::{TimeZone, Utc};
use hymical_forms::testing::clock::{ManualClock, SystemClock};
use serde_json::{json, Value};

use support::harness::{data, serve_on_loopback, TestApp};
use support::receiver::Receiver;

const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
];

/// A receiver that lets a request in only with the credentials its path names: `/basic`
/// (`forms` / `pa:ss wörd`), `/bearer` and `/bare` (`tok.en-1`), `/keyed` (`X-Api-Key: k3y`, and
/// `X-Tenant: acme`); 401 otherwise. Records the headers of each request by path.
#[derive(Clone, Default)]
struct CheckingReceiver {
    seen: Arc<Mutex<Vec<(String, HeaderMap)>>>,
}

impl CheckingReceiver {
    async fn start() -> (CheckingReceiver, String) {
        let receiver = CheckingReceiver::default();
        let check = |path: &'static str| {
            let receiver = receiver.clone();
            move |headers: HeaderMap| async move {
                receiver
                    .seen
                    .lock()
                    .unwrap()
                    .push((path.to_string(), headers.clone()));
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
                let allowed = match path {
                    // base64("forms:pa:ss wörd")
                    "/basic" => header("authorization") == Some("Basic Zm9ybXM6cGE6c3Mgd8O2cmQ="),
                    "/bearer" | "/bare" => header("authorization") == Some("Bearer tok.en-1"),
                    _ => header("x-api-key") == Some("k3y") && header("x-tenant") == Some("acme"),
                };
                let signed = headers.contains_key("webhook-signature")
                    && headers.contains_key("hymical-signature");
                if allowed && signed {
                    StatusCode::NO_CONTENT
                } else {
                    StatusCode::UNAUTHORIZED
                }
            }
        };
        let router = Router::new()
            .route("/basic", post(check("/basic")))
            .route("/bearer", post(check("/bearer")))
            .route("/bare", post(check("/bare")))
            .route("/keyed", post(check("/keyed")));
        let addr = serve_on_loopback(router).await;
        (receiver, format!("http://{addr}"))
    }

    fn seen(&self, path: &str) -> Vec<HeaderMap> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(p, _)| p == path)
            .map(|(_, headers)| headers.clone())
            .collect()
    }
}

async fn add_webhook(app: &TestApp, key: &str, input: Value) -> String {
    let answer = data(
        app.gql(
            key,
            "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id } } }",
            json!({ "input": input }),
        )
        .await,
    );
    answer["addWebhookDestination"]["destination"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn update(app: &TestApp, key: &str, input: Value) -> Value {
    app.gql(
        key,
        "mutation($input: UpdateDestinationInput!) { updateDestination(input: $input) { destination { url headers { name value secret } auth { kind username } retryPolicy { maxAttempts firstWaitSeconds maxWaitSeconds } } } }",
        json!({ "input": input }),
    )
    .await
}

/// The states of the endpoint's deliveries, by destination id.
async fn states(app: &TestApp, key: &str) -> Vec<(String, String)> {
    let answer = data(
        app.gql(
            key,
            "{ deliveries(first: 50) { edges { node { state destination { id } } } } }",
            json!({}),
        )
        .await,
    );
    let mut states: Vec<(String, String)> = answer["deliveries"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| {
            (
                edge["node"]["destination"]["id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                edge["node"]["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    states.sort();
    states
}

#[tokio::test(flavor = "multi_thread")]
async fn each_receiver_gets_its_headers_and_authentication() {
    let (receiver, base) = CheckingReceiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    let basic = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": format!("{base}/basic"),
                "auth": { "basic": { "username": "forms", "password": "pa:ss wörd" } } }),
    )
    .await;
    let bearer = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": format!("{base}/bearer"),
                "auth": { "bearer": { "token": "tok.en-1" } } }),
    )
    .await;
    let keyed = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": format!("{base}/keyed"),
                "headers": [
                    { "name": "X-Api-Key", "value": "k3y", "secret": true },
                    { "name": "X-Tenant", "value": "acme" }
                ] }),
    )
    .await;
    // A receiver without credentials is refused by the checking receiver: the control.
    let bare = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": format!("{base}/bare") }),
    )
    .await;

    // Read back: secret values and credentials never are.
    let listed = data(
        app.gql(
            &key,
            "{ endpoint(id: \"contact\") { destinations { id headers { name value secret } auth { kind username } retryPolicy { maxAttempts } } } }",
            json!({}),
        )
        .await,
    );
    let listed = listed["endpoint"]["destinations"].clone();
    assert_eq!(
        listed[0]["auth"],
        json!({ "kind": "BASIC", "username": "forms" })
    );
    assert_eq!(
        listed[1]["auth"],
        json!({ "kind": "BEARER", "username": null })
    );
    assert_eq!(
        listed[2]["headers"],
        json!([
            { "name": "X-Api-Key", "value": null, "secret": true },
            { "name": "X-Tenant", "value": "acme", "secret": false }
        ])
    );
    assert_eq!(listed[3]["auth"], Value::Null);
    assert_eq!(
        listed[3]["retryPolicy"],
        Value::Null,
        "the server's schedule"
    );
    assert!(!listed.to_string().contains("k3y") && !listed.to_string().contains("tok.en-1"));

    app.submit("contact", "message=hello").await;
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 4);
    let states = states(&app, &key).await;
    let state_of = |id: &str| states.iter().find(|(d, _)| d == id).unwrap().1.clone();
    assert_eq!(state_of(&basic), "DELIVERED");
    assert_eq!(state_of(&bearer), "DELIVERED");
    assert_eq!(state_of(&keyed), "DELIVERED");
    assert_eq!(state_of(&bare), "FAILED", "401 is final: the control holds");
    let keyed_headers = &receiver.seen("/keyed")[0];
    assert_eq!(keyed_headers["x-tenant"], "acme");
    assert!(
        !keyed_headers.contains_key("authorization"),
        "headers only, no authentication"
    );

    // Changed: the secret header given without a value keeps its value; the bearer
    // token rotated; the Basic authentication removed.
    let changed = update(
        &app,
        &key,
        json!({ "id": keyed, "headers": [
            { "name": "X-Tenant", "value": "acme" },
            { "name": "X-Api-Key", "secret": true }
        ] }),
    )
    .await;
    assert_eq!(
        data(changed)["updateDestination"]["destination"]["headers"][1],
        json!({ "name": "X-Api-Key", "value": null, "secret": true })
    );
    data(
        update(
            &app,
            &key,
            json!({ "id": bearer, "auth": { "bearer": { "token": "tok.en-2" } } }),
        )
        .await,
    );
    let removed = data(update(&app, &key, json!({ "id": basic, "auth": null })).await);
    assert_eq!(
        removed["updateDestination"]["destination"]["auth"],
        Value::Null
    );

    app.submit("contact", "message=again").await;
    assert_eq!(worker.run_once().await.unwrap(), 4);
    assert_eq!(receiver.seen("/keyed").len(), 2);
    assert_eq!(receiver.seen("/keyed")[1]["x-api-key"], "k3y", "kept");
    let bearers = receiver.seen("/bearer");
    assert_eq!(bearers.len(), 2, "{bearers:?}");
    assert_eq!(bearers[1]["authorization"], "Bearer tok.en-2");
    assert!(!receiver.seen("/basic")[1].contains_key("authorization"));
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_go_to_the_current_url_only() {
    let (receiver, base) = CheckingReceiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    let id = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": format!("{base}/bearer"),
                "auth": { "bearer": { "token": "tok.en-1" } },
                "headers": [{ "name": "X-Api-Key", "value": "k3y", "secret": true }] }),
    )
    .await;
    // Queued for /bearer; then the destination moves to /keyed with its headers.
    app.submit("contact", "message=queued").await;
    data(update(&app, &key, json!({ "id": id, "url": format!("{base}/keyed"), "auth": null,
        "headers": [{ "name": "X-Api-Key", "secret": true }, { "name": "X-Tenant", "value": "acme" }] })).await);
    app.submit("contact", "message=new").await;
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 2);
    let old = receiver.seen("/bearer");
    assert_eq!(old.len(), 1);
    assert!(
        !old[0].contains_key("x-api-key") && !old[0].contains_key("authorization"),
        "the earlier URL is sent no credential of the destination's now: {old:?}"
    );
    let new = receiver.seen("/keyed");
    assert_eq!(new.len(), 1);
    assert_eq!(new[0]["x-api-key"], "k3y");

    // Moved to another origin: the secret header and the authentication stay behind.
    data(
        update(
            &app,
            &key,
            json!({ "id": id, "auth": { "bearer": { "token": "tok.en-1" } } }),
        )
        .await,
    );
    let (_, elsewhere) = CheckingReceiver::start().await;
    let moved = data(
        update(
            &app,
            &key,
            json!({ "id": id, "url": format!("{elsewhere}/keyed") }),
        )
        .await,
    );
    let moved = &moved["updateDestination"]["destination"];
    assert_eq!(moved["auth"], Value::Null, "{moved}");
    assert_eq!(
        moved["headers"],
        json!([{ "name": "X-Tenant", "value": "acme", "secret": false }])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_retries_on_its_own_schedule_and_a_replay_starts_it_again() {
    let receiver = Receiver::start().await;
    let start = Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = TestApp::start_with(DEV, clock.clone()).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    // Its own: 3 attempts, 2 s then 3 s (capped). The server's: 5 attempts from 10 s.
    let own = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": receiver.url("/status/503"),
                "retryPolicy": { "maxAttempts": 3, "firstWaitSeconds": 2, "maxWaitSeconds": 3 } }),
    )
    .await;
    let server = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": receiver.url("/status/503") }),
    )
    .await;
    app.submit("contact", "message=hello").await;
    let worker = app.worker(None);
    let due_of = |deliveries: &[support::harness::DeliveryRow], destination: &str| {
        deliveries
            .iter()
            .find(|d| d.destination_id.as_deref() == Some(destination))
            .map(|d| (d.state.clone(), d.next_attempt_at - start, d.cycle_attempts))
            .unwrap()
    };
    assert_eq!(worker.run_once().await.unwrap(), 2);
    let deliveries = app.db.deliveries().await;
    assert_eq!(
        due_of(&deliveries, &own),
        ("pending".into(), chrono::Duration::seconds(2), 1)
    );
    assert_eq!(
        due_of(&deliveries, &server),
        ("pending".into(), chrono::Duration::seconds(10), 1)
    );
    clock.set(start + chrono::Duration::seconds(2));
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!(
        due_of(&app.db.deliveries().await, &own),
        ("pending".into(), chrono::Duration::seconds(5), 2),
        "2 s doubled is 4, capped at 3"
    );
    clock.set(start + chrono::Duration::seconds(5));
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let (state, _, cycle) = due_of(&app.db.deliveries().await, &own);
    assert_eq!((state.as_str(), cycle), ("failed", 3), "its own allowance");

    // A replay starts its own schedule again: one attempt, then 2 s.
    let failed = app
        .db
        .deliveries()
        .await
        .into_iter()
        .find(|d| d.destination_id.as_deref() == Some(own.as_str()))
        .unwrap();
    data(
        app.gql(
            &key,
            "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state } } }",
            json!({ "id": failed.id }),
        )
        .await,
    );
    clock.set(start + chrono::Duration::seconds(6));
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let (state, due, cycle) = due_of(&app.db.deliveries().await, &own);
    assert_eq!(
        (state.as_str(), due, cycle),
        ("pending", chrono::Duration::seconds(8), 1)
    );

    // Back to the server's schedule.
    let back = data(update(&app, &key, json!({ "id": own, "retryPolicy": null })).await);
    assert_eq!(
        back["updateDestination"]["destination"]["retryPolicy"],
        Value::Null
    );
    clock.set(start + chrono::Duration::seconds(8));
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let (_, due, cycle) = due_of(&app.db.deliveries().await, &own);
    assert_eq!((due, cycle), (chrono::Duration::seconds(8 + 20), 2));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_receiver_settings_are_refused_and_nothing_is_stored() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    let url = "http://127.0.0.1:9/hook";
    let header = |name: &str, value: &str| json!([{ "name": name, "value": value }]);
    let refused = [
        (
            json!({ "headers": header("Host", "example.org") }),
            "headers.name",
        ),
        (
            json!({ "headers": header("content-type", "text/plain") }),
            "headers.name",
        ),
        (
            json!({ "headers": header("Transfer-Encoding", "chunked") }),
            "headers.name",
        ),
        (
            json!({ "headers": header("Connection", "close") }),
            "headers.name",
        ),
        (
            json!({ "headers": header("webhook-signature", "v1,x") }),
            "headers.name",
        ),
        (
            json!({ "headers": header("Hymical-Signature", "x") }),
            "headers.name",
        ),
        (
            json!({ "headers": header("X-Bad Name", "x") }),
            "headers.name",
        ),
        (
            json!({ "headers": header("X-Split", "a\r\nInjected: yes") }),
            "headers.value",
        ),
        (
            json!({ "headers": header("X-Lf", "a\nb") }),
            "headers.value",
        ),
        (
            json!({ "headers": [{ "name": "X-Secret", "secret": true }] }),
            "headers.value",
        ),
        (
            json!({ "headers": (0..21).map(|i| json!({ "name": format!("X-{i}"), "value": "v" })).collect::<Vec<_>>() }),
            "headers",
        ),
        (
            json!({ "headers": header("Authorization", "Token x"), "auth": { "bearer": { "token": "t" } } }),
            "headers.name",
        ),
        (
            json!({ "auth": { "basic": { "username": "a:b", "password": "x" } } }),
            "auth.basic.username",
        ),
        (
            json!({ "auth": { "basic": { "username": "a", "password": "" } } }),
            "auth.basic.password",
        ),
        (
            json!({ "auth": { "bearer": { "token": "two words" } } }),
            "auth.bearer.token",
        ),
        (
            json!({ "auth": { "bearer": { "token": "line\r\nbreak" } } }),
            "auth.bearer.token",
        ),
        (
            json!({ "retryPolicy": { "maxAttempts": 0, "firstWaitSeconds": 1, "maxWaitSeconds": 1 } }),
            "retryPolicy.maxAttempts",
        ),
        (
            json!({ "retryPolicy": { "maxAttempts": 3, "firstWaitSeconds": 10, "maxWaitSeconds": 5 } }),
            "retryPolicy.maxWaitSeconds",
        ),
        (
            json!({ "retryPolicy": { "maxAttempts": 3, "firstWaitSeconds": 0, "maxWaitSeconds": 5 } }),
            "retryPolicy.firstWaitSeconds",
        ),
    ];
    for (extra, field) in refused {
        let mut input = json!({ "endpointId": "contact", "url": url });
        for (name, value) in extra.as_object().unwrap() {
            input[name] = value.clone();
        }
        let answer = app
            .gql(
                &key,
                "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id } } }",
                json!({ "input": input }),
            )
            .await;
        let error = &answer["errors"][0];
        assert_eq!(
            error["extensions"]["code"], "INVALID_INPUT",
            "{extra}: {answer}"
        );
        assert_eq!(
            error["extensions"]["details"]["field"], field,
            "{extra}: {answer}"
        );
    }
    // Both kinds of authentication at once is not a oneOf input.
    let both = app
        .gql(
            &key,
            "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id } } }",
            json!({ "input": { "endpointId": "contact", "url": url,
                "auth": { "basic": { "username": "a", "password": "b" }, "bearer": { "token": "t" } } } }),
        )
        .await;
    assert!(both["errors"][0]["message"].is_string(), "{both}");
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM destinations").await,
        0
    );

    // A destination that exists: refused changes leave it as it was.
    let id = add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": url,
                "headers": [{ "name": "X-Api-Key", "value": "k3y", "secret": true }],
                "auth": { "bearer": { "token": "t" } } }),
    )
    .await;
    for change in [
        json!({ "id": id, "headers": [{ "name": "Authorization", "value": "Token x" }] }),
        json!({ "id": id, "headers": [{ "name": "X-Other", "secret": true }] }),
        json!({ "id": id, "auth": { "basic": { "username": "", "password": "x" } } }),
        json!({ "id": id, "retryPolicy": { "maxAttempts": 1001, "firstWaitSeconds": 1, "maxWaitSeconds": 1 } }),
    ] {
        let answer = update(&app, &key, change.clone()).await;
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], "INVALID_INPUT",
            "{change}: {answer}"
        );
    }
    let stored = app
        .db
        .count("SELECT count(*) AS n FROM destinations WHERE request_headers = '[{\"name\": \"X-Api-Key\", \"value\": \"k3y\", \"secret\": true}]' AND request_auth = '{\"kind\": \"bearer\", \"token\": \"t\"}' AND retry_policy IS NULL")
        .await;
    assert_eq!(stored, 1, "unchanged");
    // Headers belong to webhooks.
    let answer = app
        .gql(
            &key,
            "mutation { addAutoresponderDestination(input: { endpointId: \"contact\", subject: \"Thanks\", body: \"Got it\" }) { destination { id } } }",
            json!({}),
        )
        .await;
    // Without a mail server an autoresponder is refused first; that is its own error.
    assert_eq!(
        answer["errors"][0]["extensions"]["code"], "EMAIL_NOT_CONFIGURED",
        "{answer}"
    );
}

/// Whether node's own Ed25519 (not this service's code) verifies a `v1a` signature of
/// `webhook-signature` over `{id}.{timestamp}.{body}` with the public key `whpk_…`.
fn node_verifies_v1a(public_key: &str, request: &support::receiver::Received) -> bool {
    use std::io::Write;
    let header = |name: &str| request.headers[name].to_str().unwrap().to_string();
    let script = r#"
const crypto = require('crypto');
const [publicKey, id, timestamp, signatures] = process.argv.slice(1);
const body = require('fs').readFileSync(0);
const spki = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'),
                            Buffer.from(publicKey.slice('whpk_'.length), 'base64')]);
const key = crypto.createPublicKey({ key: spki, format: 'der', type: 'spki' });
const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]);
const ok = signatures.split(' ').filter(s => s.startsWith('v1a,'))
  .some(s => crypto.verify(null, signed, key, Buffer.from(s.slice(4), 'base64')));
process.exit(ok ? 0 : 1);
"#;
    let mut child = std::process::Command::new("node")
        .args(["-e", script, public_key])
        .arg(header("webhook-id"))
        .arg(header("webhook-timestamp"))
        .arg(header("webhook-signature"))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("node runs (installed by the test command)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&request.body)
        .unwrap();
    child.wait().unwrap().success()
}

#[tokio::test(flavor = "multi_thread")]
async fn ed25519_signatures_verify_with_the_public_key_beside_hmac() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    let added = data(
        app.gql(
            &key,
            "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { webhookSecret destination { id ed25519PublicKey } } }",
            json!({ "input": { "endpointId": "contact", "url": receiver.url("/hook"), "signWithEd25519": true } }),
        )
        .await,
    );
    let id = added["addWebhookDestination"]["destination"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let public_key = added["addWebhookDestination"]["destination"]["ed25519PublicKey"]
        .as_str()
        .unwrap()
        .to_string();
    let secret = added["addWebhookDestination"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(public_key.starts_with("whpk_"), "{public_key}");
    let stored_key = app
        .db
        .count("SELECT count(*) AS n FROM destinations WHERE ed25519_key LIKE 'whsk_%'")
        .await;
    assert_eq!(stored_key, 1);

    app.submit("contact", "message=signed").await;
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let request = receiver.wait_for(1).await.remove(0);
    let signatures = request.headers["webhook-signature"].to_str().unwrap();
    assert!(
        signatures.starts_with("v1,") && signatures.contains(" v1a,"),
        "{signatures}"
    );
    assert!(node_verifies_v1a(&public_key, &request), "v1a verifies");
    let mut tampered = request.clone();
    tampered.body = bytes::Bytes::from(format!("{} ", String::from_utf8_lossy(&request.body)));
    assert!(
        !node_verifies_v1a(&public_key, &tampered),
        "a changed body does not"
    );
    // Receivers that know HMAC only still verify: each library skips the `v1a` entry.
    let case = crate::verifiers::Case::of(&request, &secret);
    for (library, answer) in crate::verifiers::all_verify(&case).await {
        assert_eq!(answer, Ok(()), "{library:?}");
    }

    // Turned off: HMAC only again, the key forgotten.
    let off = data(update(&app, &key, json!({ "id": id, "signWithEd25519": false })).await);
    assert!(off.to_string().contains("updateDestination"));
    app.submit("contact", "message=hmac").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let request = receiver.wait_for(2).await.remove(1);
    let signatures = request.headers["webhook-signature"].to_str().unwrap();
    assert!(!signatures.contains("v1a,"), "{signatures}");
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM destinations WHERE ed25519_key IS NOT NULL")
            .await,
        0
    );
}

/// The hostile submission every chat format is given: mentions of every platform,
/// Markdown, a link, markup, and a value longer than any platform takes.
const HOSTILE: &str = "message=%40everyone+%40here+%3C%21channel%3E+%3Cusers%2Fall%3E+**bold**+%5Blink%5D%28https%3A%2F%2Fevil.example%29+%3Cb%3Ex%3C%2Fb%3E+%60code%60&name=Ann";

#[tokio::test(flavor = "multi_thread")]
async fn each_chat_platform_gets_its_documented_body_with_values_harmless() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    let platforms = ["SLACK", "DISCORD", "TEAMS", "MATTERMOST", "GOOGLE_CHAT"];
    for platform in platforms {
        add_webhook(
            &app,
            &key,
            json!({ "endpointId": "contact", "url": receiver.url(&format!("/chat/{platform}")), "format": platform }),
        )
        .await;
    }
    let long = "z".repeat(10_000);
    app.submit("contact", &format!("{HOSTILE}&long={long}"))
        .await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 5);
    let received = receiver.wait_for(5).await;
    let body_of = |platform: &str| -> Value {
        let request = received
            .iter()
            .find(|r| r.path == format!("/chat/{platform}"))
            .unwrap();
        assert_eq!(request.headers["content-type"], "application/json");
        serde_json::from_slice(&request.body).unwrap()
    };
    let longest_value = |values: Vec<&str>| values.iter().map(|v| v.chars().count()).max().unwrap();

    // Slack: a header, one section of two plain_text fields per field; no mrkdwn at all,
    // so `<!channel>` and `**` are shown as written, and the notification text holds
    // nothing submitted.
    let slack = body_of("SLACK");
    assert_eq!(slack["blocks"][0]["type"], "header");
    assert_eq!(slack["text"], "New submission to Contact");
    let texts: Vec<&str> = slack["blocks"].as_array().unwrap()[1..]
        .iter()
        .flat_map(|block| block["fields"].as_array().unwrap())
        .map(|field| {
            assert_eq!(field["type"], "plain_text");
            field["text"].as_str().unwrap()
        })
        .collect();
    assert!(!slack.to_string().contains("mrkdwn"));
    let message = texts.iter().find(|t| t.contains("channel")).unwrap();
    assert!(
        message.contains("@\u{200B}everyone") && !message.contains("@everyone"),
        "{message}"
    );
    assert!(longest_value(texts.clone()) <= 1900);
    assert!(texts.iter().any(|t| t.ends_with('…')), "cut with a marker");

    // Discord: one embed, no mention parsed, Markdown escaped, within its limits.
    let discord = body_of("DISCORD");
    assert_eq!(discord["allowed_mentions"], json!({ "parse": [] }));
    let fields = discord["embeds"][0]["fields"].as_array().unwrap();
    let value = |name: &str| {
        fields.iter().find(|f| f["name"] == name).unwrap()["value"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let message = value("message");
    assert!(
        message.contains("\\*\\*bold\\*\\*") && message.contains("\\[link\\]"),
        "{message}"
    );
    assert!(!message.contains("@everyone"), "{message}");
    assert!(value("long").chars().count() <= 1024 && value("long").ends_with('…'));
    assert_eq!(value("name"), "Ann");

    // Teams: a message with one Adaptive Card and a FactSet.
    let teams = body_of("TEAMS");
    assert_eq!(teams["type"], "message");
    let card = &teams["attachments"][0];
    assert_eq!(
        card["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(card["content"]["type"], "AdaptiveCard");
    let facts = card["content"]["body"][1]["facts"].as_array().unwrap();
    let message = facts.iter().find(|f| f["title"] == "message").unwrap()["value"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("\\*\\*bold\\*\\*") && message.contains("\\<\\!channel\\>"),
        "{message}"
    );

    // Mattermost: an attachment whose fields are the submission; @-mentions broken.
    let mattermost = body_of("MATTERMOST");
    let fields = mattermost["attachments"][0]["fields"].as_array().unwrap();
    let message = fields.iter().find(|f| f["title"] == "message").unwrap()["value"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("@\u{200B}here") && !message.contains("@here"),
        "{message}"
    );

    // Google Chat: a card of decorated texts, markup as entities.
    let chat = body_of("GOOGLE_CHAT");
    let widgets = chat["cardsV2"][0]["card"]["sections"][0]["widgets"]
        .as_array()
        .unwrap();
    let message = widgets
        .iter()
        .find(|w| w["decoratedText"]["topLabel"] == "message")
        .unwrap()["decoratedText"]["text"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("&lt;users/all&gt;") && !message.contains("<users/all>"),
        "{message}"
    );
    assert!(!chat["text"].as_str().unwrap().contains("users/all"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_retry_after_is_waited_for() {
    let start = Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let router = Router::new().route(
        "/busy",
        post(|| async { (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "45")]) }),
    );
    let addr = serve_on_loopback(router).await;
    let app = TestApp::start_with(DEV, clock.clone()).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    add_webhook(
        &app,
        &key,
        json!({ "endpointId": "contact", "url": format!("http://{addr}/busy"), "format": "SLACK" }),
    )
    .await;
    app.submit("contact", "message=hello").await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let delivery = &app.db.deliveries().await[0];
    assert_eq!(delivery.state, "pending");
    assert_eq!(
        delivery.next_attempt_at - start,
        chrono::Duration::seconds(45),
        "the receiver's 45 s, not the schedule's 10 s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_template_shapes_the_request_and_bad_ones_are_refused_where_they_break() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("receivers").await;
    app.create_contact_endpoint(&key).await;
    let add = "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { webhookSecret destination { bodyTemplate } } }";
    let refused = [
        ("{\"a\": 1}\n{{ values.x ", "line 2, column"),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{}",
            "runs too long",
        ),
        ("text: {{ values.x }}", "JSON"),
        (
            "{% autoescape false %}{\"a\": \"{{ values.x }}\"}{% endautoescape %}",
            "line 1, column 4",
        ),
    ];
    for (template, said) in refused {
        let answer = app
            .gql(
                &key,
                add,
                json!({ "input": { "endpointId": "contact", "url": receiver.url("/hook"), "bodyTemplate": template } }),
            )
            .await;
        let error = &answer["errors"][0];
        assert_eq!(error["extensions"]["code"], "INVALID_INPUT", "{answer}");
        assert_eq!(error["extensions"]["details"]["field"], "bodyTemplate");
        assert!(
            error["message"].as_str().unwrap().contains(said),
            "{said}: {answer}"
        );
    }
    let chat = app
        .gql(
            &key,
            add,
            json!({ "input": { "endpointId": "contact", "url": receiver.url("/hook"), "format": "SLACK", "bodyTemplate": "{}" } }),
        )
        .await;
    assert_eq!(
        chat["errors"][0]["extensions"]["details"]["field"], "bodyTemplate",
        "{chat}"
    );
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM destinations").await,
        0
    );

    let template = r#"{"text": {{ values.message }}, "from": {{ values.email }}, "company": {{ values.company }}, "id": {{ submission.id }}}"#;
    let added = data(
        app.gql(
            &key,
            add,
            json!({ "input": { "endpointId": "contact", "url": receiver.url("/hook"), "bodyTemplate": template } }),
        )
        .await,
    );
    assert_eq!(
        added["addWebhookDestination"]["destination"]["bodyTemplate"],
        template
    );
    let secret = added["addWebhookDestination"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_string();
    // A value that would end its string and add a key, were it not written as JSON.
    let submission = app
        .submit(
            "contact",
            "message=hi%22%2C+%22admin%22%3A+true%2C+%22x%22%3A+%22&email=v%40example.org",
        )
        .await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let request = receiver.wait_for(1).await.remove(0);
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(
        body,
        json!({ "text": "hi\", \"admin\": true, \"x\": \"", "from": "v@example.org", "company": null, "id": submission })
    );
    // The signatures sign the body as sent.
    let case = crate::verifiers::Case::of(&request, &secret);
    for (library, answer) in crate::verifiers::all_verify(&case).await {
        assert_eq!(answer, Ok(()), "{library:?}");
    }
}
