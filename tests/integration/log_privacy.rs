//! No log level carries a secret or submitted data: a `serve` process at
//! `RUST_LOG=trace` (the database driver, HTTP and TLS crates named at `trace` too) runs the main paths (an endpoint and its destinations made through
//! GraphQL, a captcha and Akismet with their secrets, a form submitted, a webhook
//! delivered, a failing one announced by an operational webhook, receivers with a secret
//! header, a bearer token and a Basic password, an email sent, the submission read back) and its whole log is searched for every secret, every submitted
//! name and value and every address, written as text and as the byte lists, hex and
//! encodings a driver would print them in.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::routing;
use axum::{Form, Router};
use base64::Engine;
use hymical_forms::testing::clock::SystemClock;
use serde_json::{json, Value};

use support::harness::{graphql_data, serve_on_loopback, wait_for_status, ServeProcess, TestApp};
use support::receiver::Receiver;
use support::smtp_server::SmtpServer;

const CAPTCHA_SECRET: &str = "captchasecret-Vq7Rk2Lp9Xw4";
const CAPTCHA_TOKEN: &str = "captchatoken-Hn3Bz8Tq5Jm1";
const AKISMET_KEY: &str = "akismetkey-Pw6Dc2Ys8Gf4";
const RATE_LIMIT_SECRET: &str = "ratelimitsecret-Kx5Nv9Qe3Ub7";
const FIELD_NAME: &str = "zanzibarprivatefield";
const FIELD_VALUE: &str = "quetzalcoatl-private-value-8231";
const SUBMITTER_NAME: &str = "Ottoline Privacyperson";
const SUBMITTER_ADDRESS: &str = "hidden.mailbox.7731@example.org";
const RECIPIENT_ADDRESS: &str = "owner.inbox.5519@example.net";
const HEADER_SECRET: &str = "headersecret-Lm2Qa7Xc4Rb9";
const BEARER_TOKEN: &str = "bearertoken-Gd6Ts1Vn8Hk3";
const BASIC_PASSWORD: &str = "basicpassword-Yp5Wj2Ce7Nf0";
const OAUTH_CLIENT_SECRET: &str = "oauthsecret-Hq3Zt8Lw5Pc1";
const ACCESS_TOKEN: &str = "accesstoken-Rf9Kd2Bx6Mv4";

/// A captcha provider's `siteverify` (success on forms.example for the right secret) and
/// Akismet (`false`: not spam) on loopback, recording what each call was sent.
#[derive(Clone, Default)]
struct Verifiers {
    addr: Option<SocketAddr>,
    calls: Arc<Mutex<Vec<Call>>>,
}

/// A call a verifier got: its path and its form.
type Call = (String, HashMap<String, String>);

impl Verifiers {
    async fn start() -> Verifiers {
        let mut verifiers = Verifiers::default();
        let router = Router::new()
            .route("/siteverify", routing::post(siteverify))
            .route("/akismet/1.1/{call}", routing::post(akismet))
            // An OAuth2 token endpoint: the access token for any client.
            .route(
                "/token",
                routing::post(|| async {
                    axum::Json(json!({ "access_token": ACCESS_TOKEN, "token_type": "Bearer", "expires_in": 3600 }))
                }),
            )
            .with_state(verifiers.clone());
        verifiers.addr = Some(serve_on_loopback(router).await);
        verifiers
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr.unwrap())
    }

    fn calls(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(path, _)| path.clone())
            .collect()
    }
}

async fn siteverify(
    State(verifiers): State<Verifiers>,
    Form(form): Form<HashMap<String, String>>,
) -> axum::Json<Value> {
    let right = form.get("secret").map(String::as_str) == Some(CAPTCHA_SECRET)
        && form.get("response").map(String::as_str) == Some(CAPTCHA_TOKEN);
    verifiers
        .calls
        .lock()
        .unwrap()
        .push(("/siteverify".into(), form));
    axum::Json(if right {
        json!({ "success": true, "hostname": "forms.example" })
    } else {
        json!({ "success": false })
    })
}

async fn akismet(
    State(verifiers): State<Verifiers>,
    Path(call): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> &'static str {
    let right = form.get("api_key").map(String::as_str) == Some(AKISMET_KEY);
    verifiers
        .calls
        .lock()
        .unwrap()
        .push((format!("/akismet/{call}"), form));
    if right {
        "false"
    } else {
        "invalid"
    }
}

/// The data of a GraphQL answer from the server process, failing the test on an error.
async fn gql(
    http: &reqwest::Client,
    serve: &ServeProcess,
    key: &str,
    query: &str,
    variables: Value,
) -> Value {
    graphql_data(http, &serve.url("/graphql"), key, query, variables).await
}

/// Every way a log line could hold `value`: as written, as the list of its bytes that a
/// `{:?}` of a `Vec<u8>` bind parameter prints, in hex, in base64 and form-encoded.
fn renderings(value: &str) -> Vec<String> {
    let bytes = format!("{:?}", value.as_bytes());
    let mut all = vec![
        value.to_string(),
        bytes
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        hex::encode(value.as_bytes()),
        hex::encode_upper(value.as_bytes()),
        base64::engine::general_purpose::STANDARD
            .encode(value.as_bytes())
            .trim_end_matches('=')
            .to_string(),
        url::form_urlencoded::byte_serialize(value.as_bytes()).collect(),
    ];
    all.dedup();
    all
}

/// Polls `done` for up to 60 s.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_log_level_carries_a_secret_or_submitted_data() {
    let receiver = Receiver::start().await;
    let operators = Receiver::start().await;
    let verifiers = Verifiers::start().await;
    let smtp = SmtpServer::start(&[]);
    let alert_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(*b"alertsecret-Zr4Mf8Wc1Ty6-padding!")
    );
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("privacy").await;

    let smtp_port = smtp.port();
    let turnstile = verifiers.url("/siteverify");
    // Without its final `/`: read as `…/1.1/`.
    let akismet_url = verifiers.url("/akismet/1.1");
    let alert_url = operators.url("/alerts");
    let serve = ServeProcess::start(
        &app.db,
        &[
            // Everything, and the drivers by name too: neither lifts their ceiling.
            (
                "RUST_LOG",
                "trace,tokio_postgres=trace,tokio_postgres::query=trace,hyper=trace,h2=trace,reqwest=trace,rustls=trace",
            ),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_IP_SECRET", RATE_LIMIT_SECRET),
            ("FORMS_WORKER_POLL_SECONDS", "0.1"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "1"),
            ("FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES", "1"),
            ("FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES", "5"),
            ("FORMS_ALERT_WEBHOOK_URL", &alert_url),
            ("FORMS_ALERT_WEBHOOK_SECRET", &alert_secret),
            ("FORMS_CAPTCHA_TURNSTILE_VERIFY_URL", &turnstile),
            ("FORMS_AKISMET_URL", &akismet_url),
            ("FORMS_AKISMET_API_KEY", AKISMET_KEY),
            ("FORMS_SMTP_HOST", "127.0.0.1"),
            ("FORMS_SMTP_PORT", &smtp_port),
            ("FORMS_SMTP_TLS", "none"),
            ("FORMS_SMTP_FROM", "Hymical Forms <forms@example.com>"),
        ],
    );
    wait_for_status(&serve.url("/health"), 200).await;
    let http = reqwest::Client::new();

    // Made through the server: each secret and address is a bind parameter of its.
    let created = gql(
        &http,
        &serve,
        &key,
        "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { webhookSecret } }",
        json!({ "input": {
            "id": "private", "name": "Private", "webhookUrl": receiver.url("/hook"),
            "allowedOrigins": ["https://forms.example"]
        } }),
    )
    .await;
    let webhook_secret = created["createEndpoint"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_string();
    let failing = gql(
        &http,
        &serve,
        &key,
        "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { webhookSecret } }",
        json!({ "input": {
            "endpointId": "private", "url": receiver.url("/status/500"),
            "headers": [{ "name": "X-Api-Key", "value": HEADER_SECRET, "secret": true }],
            "auth": { "bearer": { "token": BEARER_TOKEN } }
        } }),
    )
    .await;
    // A receiver with Basic authentication that answers 2xx.
    gql(
        &http,
        &serve,
        &key,
        "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id } } }",
        json!({ "input": {
            "endpointId": "private", "url": receiver.url("/basic"),
            "auth": { "basic": { "username": "forms", "password": BASIC_PASSWORD } }
        } }),
    )
    .await;
    // A receiver with OAuth2 client credentials and a TLS client certificate (sent over
    // plain HTTP here: the key still travels through the claim and the client).
    let client_identity =
        rcgen::generate_simple_self_signed(vec!["forms.example".to_string()]).unwrap();
    let client_key = client_identity.signing_key.serialize_pem();
    gql(
        &http,
        &serve,
        &key,
        "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id } } }",
        json!({ "input": {
            "endpointId": "private", "url": receiver.url("/oauth"),
            "auth": { "oauth2": { "tokenUrl": verifiers.url("/token"), "clientId": "forms",
                                  "clientSecret": OAUTH_CLIENT_SECRET } },
            "clientCertificate": { "certificate": client_identity.cert.pem(), "key": client_key }
        } }),
    )
    .await;
    // A line of the key's base64 (a whole PEM spans lines; a log line holds one).
    let client_key_line = client_key.lines().nth(1).unwrap().to_string();
    let failing_secret = failing["addWebhookDestination"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_string();
    gql(
        &http,
        &serve,
        &key,
        "mutation($input: AddEmailDestinationInput!) { addEmailDestination(input: $input) { destination { id } } }",
        json!({ "input": { "endpointId": "private", "recipients": [RECIPIENT_ADDRESS] } }),
    )
    .await;
    gql(
        &http,
        &serve,
        &key,
        "mutation($input: SetSpamProtectionInput!) { setSpamProtection(input: $input) { spamProtection { captchaProvider akismet } } }",
        json!({ "input": {
            "endpointId": "private",
            "captcha": { "provider": "TURNSTILE", "secret": CAPTCHA_SECRET },
            "akismet": true
        } }),
    )
    .await;

    // A submission: its captcha verified, Akismet asked, stored, delivered.
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            (FIELD_NAME, FIELD_VALUE),
            ("name", SUBMITTER_NAME),
            ("email", SUBMITTER_ADDRESS),
            ("cf-turnstile-response", CAPTCHA_TOKEN),
        ])
        .finish();
    let response = http
        .post(serve.url("/f/private"))
        .header("origin", "https://forms.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let receipt: Value = response.json().await.unwrap();
    assert_eq!(status, 202, "{receipt}");
    let submission_id = receipt["submission_id"].as_str().unwrap().to_string();
    assert_eq!(
        verifiers.calls(),
        ["/siteverify", "/akismet/comment-check"],
        "the captcha and Akismet were asked"
    );

    // Read back through GraphQL: the values travel in a response body.
    let read = gql(
        &http,
        &serve,
        &key,
        "query($id: ID!) { submission(id: $id) { spam fields { name values } } }",
        json!({ "id": submission_id }),
    )
    .await;
    assert_eq!(read["submission"]["spam"], false, "{read}");
    assert!(read.to_string().contains(FIELD_VALUE), "{read}");

    // The webhook delivered, the failing one announced, the email sent.
    until("the webhook delivery", || {
        receiver.received().iter().any(|r| r.path == "/hook")
    })
    .await;
    until("the operational webhook", || {
        !operators.received().is_empty()
    })
    .await;
    until("the email", || !smtp.messages().is_empty()).await;
    let hook = receiver
        .received()
        .into_iter()
        .find(|r| r.path == "/hook")
        .unwrap();
    assert!(String::from_utf8_lossy(&hook.body).contains(FIELD_VALUE));
    until("the authenticated webhooks", || {
        let received = receiver.received();
        received.iter().any(|r| r.path == "/basic")
            && received.iter().any(|r| r.path == "/status/500")
            && received.iter().any(|r| r.path == "/oauth")
    })
    .await;
    // What the receivers were sent carries the credentials; nothing read back does.
    let failed = receiver
        .received()
        .into_iter()
        .find(|r| r.path == "/status/500")
        .unwrap();
    assert_eq!(failed.headers["x-api-key"], HEADER_SECRET);
    let oauth = receiver
        .received()
        .into_iter()
        .find(|r| r.path == "/oauth")
        .unwrap();
    assert_eq!(
        oauth.headers["authorization"],
        format!("Bearer {ACCESS_TOKEN}").as_str()
    );
    assert_eq!(
        failed.headers["authorization"],
        format!("Bearer {BEARER_TOKEN}").as_str()
    );
    let answers = gql(
        &http,
        &serve,
        &key,
        "{ endpoint(id: \"private\") { destinations { headers { name value secret } auth { kind username } }
           deliveries(first: 10) { edges { node { attemptHistory { error httpStatus } } } } } }",
        json!({}),
    )
    .await
    .to_string();
    assert!(
        answers.contains("X-Api-Key") && answers.contains("BEARER"),
        "{answers}"
    );
    let metrics = http
        .get(serve.url("/metrics"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("deliver"), "{metrics}");
    for secret in [
        HEADER_SECRET,
        BEARER_TOKEN,
        BASIC_PASSWORD,
        OAUTH_CLIENT_SECRET,
        ACCESS_TOKEN,
        client_key_line.as_str(),
    ] {
        for rendering in renderings(secret) {
            assert!(
                !answers.contains(&rendering),
                "GraphQL answers {secret}: {answers}"
            );
            assert!(!metrics.contains(&rendering), "metrics hold {secret}");
        }
    }
    let email = &smtp.messages()[0];
    assert_eq!(email["rcpt_tos"], json!([RECIPIENT_ADDRESS]), "{email}");
    assert!(email["raw"].as_str().unwrap().contains(SUBMITTER_ADDRESS));
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");

    // The log is at trace: the service's own debug lines are in it.
    assert!(log.contains("DEBUG"), "not a debug log: {log}");
    assert!(log.contains("claimed deliveries"), "{log}");

    let password = app.db.password();
    let forbidden = [
        ("the management key", key.as_str()),
        ("the webhook secret", webhook_secret.as_str()),
        ("the second webhook secret", failing_secret.as_str()),
        ("the alert secret", alert_secret.as_str()),
        ("the captcha secret", CAPTCHA_SECRET),
        ("the captcha token", CAPTCHA_TOKEN),
        ("the Akismet key", AKISMET_KEY),
        ("the rate-limit secret", RATE_LIMIT_SECRET),
        ("a secret header's value", HEADER_SECRET),
        ("a bearer token", BEARER_TOKEN),
        ("a Basic password", BASIC_PASSWORD),
        ("an OAuth2 client secret", OAUTH_CLIENT_SECRET),
        ("an OAuth2 access token", ACCESS_TOKEN),
        ("a TLS client key", client_key_line.as_str()),
        ("the database password", password.as_str()),
        ("a submitted field name", FIELD_NAME),
        ("a submitted value", FIELD_VALUE),
        ("a submitted name", SUBMITTER_NAME),
        ("a submitted address", SUBMITTER_ADDRESS),
        ("a recipient's address", RECIPIENT_ADDRESS),
    ];
    let mut found = Vec::new();
    for (what, value) in forbidden {
        for rendering in renderings(value) {
            if let Some(line) = log.lines().find(|line| line.contains(&rendering)) {
                found.push(format!(
                    "{what} ({rendering:?}) in: {}",
                    line.chars().take(400).collect::<String>()
                ));
                break;
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} of {} lines leak:\n{}",
        found.len(),
        log.lines().count(),
        found.join("\n")
    );
}
