//! Spam: captchas verified against a fake verifier on loopback that speaks each
//! provider's `siteverify` protocol, the local rules and the form stamp, Akismet against a
//! fake `comment-check`, the spam folder (same answer, no delivery) and "not spam"
//! delivering once, across processes and a SIGKILL (docs/intake.md, "Spam").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing;
use axum::{Form, Router};
use chrono::{TimeZone, Utc};
use hymical_forms::testing::clock::{ManualClock, SystemClock};
use serde_json::{json, Value};

use support::harness::{
    data, graphql_data, serve_on_loopback, wait_for_status, ServeProcess, TestApp,
};
use support::receiver::Receiver;

/// A verifier on loopback: `/{provider}` answers as a captcha provider's `siteverify`,
/// `/akismet/1.1/{call}` as Akismet. It records every request's path and form.
///
/// Captcha tokens say what to answer: `pass:{host}` success on that host,
/// `score:{s}:{host}` success with a score (v3), `fail` a refusal, `slow` no answer for
/// 10 s, `garbage` a body that is not JSON; anything after a `#` only makes a token
/// unique (a token is spent once). A wrong secret is refused. Akismet answers
/// `true` when the comment holds "viagra", `false` otherwise, and nothing for 10 s while
/// `akismet_down` is set.
#[derive(Clone, Default)]
struct FakeVerifier {
    addr: Option<SocketAddr>,
    calls: Arc<Mutex<Vec<Call>>>,
    akismet_down: Arc<std::sync::atomic::AtomicBool>,
}

/// A request the fake verifier got: its path and its form.
type Call = (String, HashMap<String, String>);

const SECRET: &str = "test-captcha-secret";
const AKISMET_KEY: &str = "akismet-test-key";

impl FakeVerifier {
    async fn start() -> FakeVerifier {
        let mut fake = FakeVerifier::default();
        let router = Router::new()
            .route("/akismet/1.1/{call}", routing::post(akismet))
            .route("/{provider}", routing::post(siteverify))
            .with_state(fake.clone());
        fake.addr = Some(serve_on_loopback(router).await);
        fake
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr.unwrap())
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The settings that point the service at this fake.
    fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true".into()),
            ("FORMS_RATE_LIMIT_ENABLED", "false".into()),
            ("FORMS_CAPTCHA_TURNSTILE_VERIFY_URL", self.url("/turnstile")),
            ("FORMS_CAPTCHA_HCAPTCHA_VERIFY_URL", self.url("/hcaptcha")),
            ("FORMS_CAPTCHA_RECAPTCHA_VERIFY_URL", self.url("/recaptcha")),
            ("FORMS_CAPTCHA_VERIFY_TIMEOUT_SECONDS", "1".into()),
            // Without its final `/`, which is added (the base was once used as
            // written, and `comment-check` went to `…/1.1comment-check`).
            ("FORMS_AKISMET_URL", self.url("/akismet/1.1")),
            ("FORMS_AKISMET_API_KEY", AKISMET_KEY.into()),
        ]
    }
}

async fn siteverify(
    State(fake): State<FakeVerifier>,
    Path(provider): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    fake.calls
        .lock()
        .unwrap()
        .push((format!("/{provider}"), form.clone()));
    if form.get("secret").map(String::as_str) != Some(SECRET) {
        return axum::Json(json!({ "success": false, "error-codes": ["invalid-input-secret"] }))
            .into_response();
    }
    let token = form.get("response").cloned().unwrap_or_default();
    let meaning = token.split('#').next().unwrap_or_default();
    let parts: Vec<&str> = meaning.split(':').collect();
    match parts.as_slice() {
        ["pass", host] => axum::Json(json!({
            "success": true, "hostname": host, "challenge_ts": "2026-12-05T12:00:00Z"
        }))
        .into_response(),
        ["score", score, host] => axum::Json(json!({
            "success": true, "hostname": host, "score": score.parse::<f64>().unwrap(),
            "action": "submit", "challenge_ts": "2026-12-05T12:00:00Z"
        }))
        .into_response(),
        ["slow"] => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            axum::Json(json!({ "success": true })).into_response()
        }
        ["garbage"] => "<html>oops</html>".into_response(),
        _ => axum::Json(json!({ "success": false, "error-codes": ["invalid-input-response"] }))
            .into_response(),
    }
}

async fn akismet(
    State(fake): State<FakeVerifier>,
    Path(call): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> String {
    fake.calls
        .lock()
        .unwrap()
        .push((format!("/akismet/{call}"), form.clone()));
    if fake.akismet_down.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    if call != "comment-check" {
        return "Thanks for making the web a better place.".into();
    }
    let content = form.get("comment_content").cloned().unwrap_or_default();
    if content.contains("viagra") {
        "true"
    } else {
        "false"
    }
    .into()
}

async fn app_with(
    fake: &FakeVerifier,
    clock: Arc<dyn hymical_forms::testing::clock::Clock>,
) -> TestApp {
    start_with_vars(fake.vars(), clock).await
}

/// An app started with `vars` (as [`FakeVerifier::vars`] gives them).
async fn start_with_vars(
    vars: Vec<(&'static str, String)>,
    clock: Arc<dyn hymical_forms::testing::clock::Clock>,
) -> TestApp {
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestApp::start_with(&pairs, clock).await
}

/// The fake verifier, a receiver, an app pointed at them (the system clock) and an admin
/// key.
async fn started() -> (FakeVerifier, Receiver, TestApp, String) {
    let fake = FakeVerifier::start().await;
    let receiver = Receiver::start().await;
    let app = app_with(&fake, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("ops").await;
    (fake, receiver, app, key)
}

/// Adds a webhook destination to `url`.
async fn add_webhook(app: &TestApp, key: &str, endpoint: &str, url: &str) {
    data(
        app.gql(
            key,
            "mutation($endpoint: ID!, $url: String!) { addWebhookDestination(input: { endpointId: $endpoint, url: $url }) { destination { id } } }",
            json!({ "endpoint": endpoint, "url": url }),
        )
        .await,
    );
}

/// A form stamp for `endpoint`, fetched as the snippet does when its page loads.
async fn form_stamp(app: &TestApp, endpoint: &str) -> String {
    let stamp = app
        .form_stamp(endpoint, &[("origin", "https://forms.example")])
        .await;
    assert_eq!(stamp["field"], "_hymical_stamp");
    stamp["value"].as_str().unwrap().to_string()
}

fn error_code(answer: &Value) -> (String, Value) {
    let error = &answer["errors"][0];
    (
        error["extensions"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        error["extensions"]["details"].clone(),
    )
}

/// An endpoint taking forms from https://forms.example, whose webhook goes to `url`.
async fn endpoint(app: &TestApp, key: &str, id: &str, url: &str) {
    data(
        app.gql(
            key,
            "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }",
            json!({ "input": {
                "id": id, "name": "Contact", "webhookUrl": url,
                "allowedOrigins": ["https://forms.example"]
            } }),
        )
        .await,
    );
}

async fn protect(app: &TestApp, key: &str, input: Value) -> Value {
    app.gql(
        key,
        "mutation($input: SetSpamProtectionInput!) { setSpamProtection(input: $input) { spamProtection { captchaProvider captchaMinScore whenVerifierUnreachable maxLinks blockedWords blockedPatterns blockedSenders minFillSeconds akismet } } }",
        json!({ "input": input }),
    )
    .await
}

/// Posts a urlencoded form from https://forms.example; answers the status and body.
async fn post(app: &TestApp, endpoint: &str, form: &[(&str, &str)]) -> (u16, Value) {
    app.post_urlencoded(endpoint, form, &[("origin", "https://forms.example")])
        .await
}

/// A submission as the API shows it.
async fn submission(app: &TestApp, key: &str, id: &str) -> Value {
    data(
        app.gql(
            key,
            "query($id: ID!) { submission(id: $id) { id spam spamReasons spamReviewedAt fields { name values } deliveries { id state } } }",
            json!({ "id": id }),
        )
        .await,
    )["submission"]
        .clone()
}

/// A post's answer (`status`, `receipt`) is accepted, and its submission is in the spam
/// folder for `reason` alone, with no delivery.
async fn assert_filed_as_spam(
    app: &TestApp,
    key: &str,
    (status, receipt): (u16, Value),
    reason: &str,
) {
    assert_eq!(status, 202, "{receipt}");
    assert_eq!(receipt["delivery"]["queued"], true, "answered as accepted");
    let stored = submission(app, key, receipt["submission_id"].as_str().unwrap()).await;
    assert_eq!(stored["spam"], true);
    assert_eq!(stored["spamReasons"], json!([reason]));
    assert_eq!(stored["deliveries"], json!([]));
}

async fn folder(app: &TestApp, key: &str, endpoint: &str, folder: &str) -> Vec<String> {
    let answer = data(
        app.gql(
            key,
            "query($filter: SubmissionFilter) { submissions(filter: $filter, first: 50) { edges { node { id } } } }",
            json!({ "filter": { "endpointId": endpoint, "folder": folder } }),
        )
        .await,
    );
    answer["submissions"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| edge["node"]["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn each_captcha_provider_is_verified_and_every_refusal_stores_nothing() {
    let (fake, receiver, app, key) = started().await;
    let providers = [
        ("TURNSTILE", "/turnstile", "cf-turnstile-response"),
        ("HCAPTCHA", "/hcaptcha", "h-captcha-response"),
        ("RECAPTCHA_V2", "/recaptcha", "g-recaptcha-response"),
        ("RECAPTCHA_V3", "/recaptcha", "g-recaptcha-response"),
    ];
    for (n, (provider, path, field)) in providers.into_iter().enumerate() {
        let id = format!("captcha-{n}");
        endpoint(&app, &key, &id, &receiver.url("/hook")).await;
        let mut captcha = json!({ "provider": provider, "secret": SECRET });
        if provider == "RECAPTCHA_V3" {
            captcha["minScore"] = json!(0.5);
        }
        let answer =
            data(protect(&app, &key, json!({ "endpointId": id, "captcha": captcha })).await);
        assert_eq!(
            answer["setSpamProtection"]["spamProtection"]["captchaProvider"],
            provider
        );

        // Solved: accepted, the token not stored, the provider asked at its own URL with
        // the secret and the token and nothing of the client.
        let token = if provider == "RECAPTCHA_V3" {
            format!("score:0.9:forms.example#{n}")
        } else {
            format!("pass:forms.example#{n}")
        };
        let (status, receipt) = post(&app, &id, &[("message", "hello"), (field, &token)]).await;
        assert_eq!(status, 202, "{provider}: {receipt}");
        let stored = submission(&app, &key, receipt["submission_id"].as_str().unwrap()).await;
        assert_eq!(stored["spam"], false, "{provider}");
        assert_eq!(
            stored["fields"],
            json!([{ "name": "message", "values": ["hello"] }])
        );
        assert_eq!(stored["deliveries"].as_array().unwrap().len(), 1);
        let (called, form) = fake.calls().last().unwrap().clone();
        assert_eq!(called, path);
        assert_eq!(form.get("secret").unwrap(), SECRET);
        assert_eq!(form.get("response").unwrap(), &token);
        assert!(
            !form.contains_key("remoteip"),
            "the client's address is not sent"
        );

        let before = app.stored_counts().await;
        // The same token again (which this fake provider, unlike the real ones, would
        // accept twice): refused here.
        let (status, body) = post(&app, &id, &[("message", "again"), (field, &token)]).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("captcha_failed")),
            "{body}"
        );
        assert_eq!(body["error"]["details"]["reason"], "reused");
        // No token; a refused one; one solved on another site.
        let (fail, elsewhere) = (format!("fail#{n}"), format!("pass:evil.example#{n}"));
        let refusals = [
            (vec![("message", "x")], "missing"),
            (vec![("message", "x"), (field, fail.as_str())], "rejected"),
            (
                vec![("message", "x"), (field, elsewhere.as_str())],
                "hostname",
            ),
            // The wrong secret would be refused the same way; the provider decides.
        ];
        for (form, reason) in refusals {
            let (status, body) = post(&app, &id, &form).await;
            assert_eq!(status, 403, "{provider} {reason}: {body}");
            assert_eq!(body["error"]["details"]["reason"], reason, "{body}");
        }
        assert_eq!(
            app.stored_counts().await,
            before,
            "{provider}: refusals store nothing"
        );

        if provider == "RECAPTCHA_V3" {
            // A score under the threshold: the spam folder, with the score as its reason,
            // answered as accepted, no delivery.
            let (status, receipt) = post(
                &app,
                &id,
                &[("message", "low"), (field, "score:0.2:forms.example#low")],
            )
            .await;
            assert_eq!(status, 202, "{receipt}");
            assert_eq!(receipt["delivery"]["queued"], true);
            let stored = submission(&app, &key, receipt["submission_id"].as_str().unwrap()).await;
            assert_eq!(stored["spam"], true);
            assert_eq!(
                stored["spamReasons"],
                json!(["captcha score 0.2 under 0.5"])
            );
            assert_eq!(stored["deliveries"], json!([]));
        }
    }
}

#[tokio::test]
async fn an_unreachable_captcha_provider_refuses_or_files_into_the_spam_folder() {
    let (_fake, receiver, app, key) = started().await;
    endpoint(&app, &key, "down", &receiver.url("/hook")).await;
    let captcha = json!({ "provider": "TURNSTILE", "secret": SECRET });
    data(
        protect(
            &app,
            &key,
            json!({ "endpointId": "down", "captcha": captcha }),
        )
        .await,
    );
    let before = app.stored_counts().await;
    for token in ["slow#1", "garbage#1"] {
        let started = std::time::Instant::now();
        let (status, body) = post(
            &app,
            "down",
            &[("message", "x"), ("cf-turnstile-response", token)],
        )
        .await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "verifier_unavailable");
        assert_eq!(body["error"]["details"]["verifier"], "captcha");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "bounded by the timeout"
        );
    }
    assert_eq!(app.stored_counts().await, before, "refused: nothing stored");

    // The spam policy: kept for an operator, answered as accepted, nothing queued. The
    // secret stays when the provider does and no new one is sent.
    let captcha = json!({ "provider": "TURNSTILE" });
    data(
        protect(
            &app,
            &key,
            json!({ "endpointId": "down", "captcha": captcha, "whenVerifierUnreachable": "SPAM" }),
        )
        .await,
    );
    for token in ["slow#2", "garbage#2"] {
        let answer = post(
            &app,
            "down",
            &[("message", "x"), ("cf-turnstile-response", token)],
        )
        .await;
        assert_filed_as_spam(
            &app,
            &key,
            answer,
            "the captcha provider could not be reached",
        )
        .await;
    }
    // A provider that answers still refuses under the spam policy.
    let (status, _) = post(
        &app,
        "down",
        &[("message", "x"), ("cf-turnstile-response", "fail#3")],
    )
    .await;
    assert_eq!(status, 403);
    // A new provider needs its secret.
    let answer = protect(
        &app,
        &key,
        json!({ "endpointId": "down", "captcha": { "provider": "HCAPTCHA" } }),
    )
    .await;
    assert_eq!(error_code(&answer).0, "INVALID_INPUT", "{answer}");
    assert_eq!(error_code(&answer).1["field"], "captcha.secret");
}

#[tokio::test]
async fn rules_file_spam_in_the_spam_folder_answered_as_accepted() {
    let fake = FakeVerifier::start().await;
    let receiver = Receiver::start().await;
    let clock = Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 12, 5, 12, 0, 0).unwrap(),
    ));
    let app = app_with(&fake, clock.clone()).await;
    let (_, key) = app.create_key("ops").await;
    endpoint(&app, &key, "rules", &receiver.url("/hook")).await;
    let answer = data(
        protect(
            &app,
            &key,
            json!({
                "endpointId": "rules",
                "maxLinks": 1,
                "blockedWords": ["Casino"],
                "blockedPatterns": ["^buy\\s+now"],
                "blockedSenders": ["@spam.example", "bad@ok.example"],
                "minFillSeconds": 3,
            }),
        )
        .await,
    );
    let stored = &answer["setSpamProtection"]["spamProtection"];
    assert_eq!(stored["blockedWords"], json!(["casino"]));
    assert_eq!(
        stored["blockedSenders"],
        json!(["spam.example", "bad@ok.example"])
    );
    // Bad settings are refused by name and change nothing.
    for (input, field) in [
        (
            json!({ "blockedPatterns": ["(unclosed"] }),
            "blockedPatterns",
        ),
        (
            json!({ "blockedSenders": ["not an address"] }),
            "blockedSenders",
        ),
        // Ranges whose normal forms are added, past what one rule set may span
        // together (docs/intake.md, "What the rules compare"): 166 in one pattern.
        (
            json!({ "blockedPatterns": [format!("[{}]", "\u{4E00}-\u{55FF}".repeat(166))] }),
            "blockedPatterns",
        ),
        (json!({ "minFillSeconds": 0 }), "minFillSeconds"),
        (json!({ "maxLinks": -1 }), "maxLinks"),
        (
            json!({ "captcha": { "provider": "TURNSTILE", "secret": SECRET, "minScore": 0.5 } }),
            "captcha.minScore",
        ),
        (
            json!({ "captcha": { "provider": "RECAPTCHA_V3", "secret": SECRET } }),
            "captcha.minScore",
        ),
    ] {
        let mut input = input;
        input["endpointId"] = json!("rules");
        let answer = protect(&app, &key, input).await;
        let (code, details) = error_code(&answer);
        assert_eq!(
            (code.as_str(), &details["field"]),
            ("INVALID_INPUT", &json!(field)),
            "{answer}"
        );
    }

    // The form stamp, as the snippet fetches it when the page loads.
    let stamp = form_stamp(&app, "rules").await;
    clock.advance(chrono::Duration::seconds(5));

    let good: &[(&str, &str)] = &[
        ("email", "ada@ok.example"),
        ("message", "see https://example.com"),
        ("_hymical_stamp", &stamp),
    ];
    let (status, accepted) = post(&app, "rules", good).await;
    assert_eq!(status, 202, "{accepted}");
    let accepted_row = submission(&app, &key, accepted["submission_id"].as_str().unwrap()).await;
    assert_eq!(accepted_row["spam"], false);
    assert!(
        accepted_row["fields"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["name"] != "_hymical_stamp"),
        "the stamp is not stored"
    );

    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (
            vec![("message", "a http://a.example b www.b.example".into())],
            "2 links, more than the 1 allowed",
        ),
        (
            vec![("message", "best CASINO deals".into())],
            "a blocked word",
        ),
        (vec![("message", "Buy   now!".into())], "blocked pattern 1"),
        (
            vec![("email", "x@mail.spam.example".into())],
            "blocked sender spam.example",
        ),
        (
            vec![("email", "Bad@OK.example".into())],
            "blocked sender bad@ok.example",
        ),
    ];
    let mut spam_ids = Vec::new();
    for (fields, reason) in cases {
        // A stamp vouches for one submission: each case has its own.
        let stamp = form_stamp(&app, "rules").await;
        clock.advance(chrono::Duration::seconds(5));
        let mut form: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        form.push(("_hymical_stamp", &stamp));
        let (status, receipt) = post(&app, "rules", &form).await;
        assert_eq!(status, 202, "{reason}: {receipt}");
        // The same answer as an accepted one: the same keys, the same delivery promise.
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&receipt), keys(&accepted));
        assert_eq!(receipt["delivery"], accepted["delivery"]);
        assert_eq!(receipt["idempotent_replay"], false);
        let id = receipt["submission_id"].as_str().unwrap().to_string();
        let stored = submission(&app, &key, &id).await;
        assert_eq!(stored["spam"], true, "{reason}");
        assert_eq!(stored["spamReasons"], json!([reason]));
        assert_eq!(stored["deliveries"], json!([]), "no delivery for spam");
        spam_ids.push(id);
    }
    // Too soon after the form was served; no stamp; a forged one.
    let fresh = form_stamp(&app, "rules").await;
    let forged = format!("{}.{}", stamp.split('.').next().unwrap(), "0".repeat(64));
    clock.advance(chrono::Duration::seconds(1));
    for (form_stamp, reason) in [
        (
            Some(fresh.as_str()),
            "sent 1 s after the form was served, under 3 s",
        ),
        (None, "no form stamp"),
        (Some(forged.as_str()), "form stamp not valid"),
    ] {
        let mut form = vec![("message", "hello")];
        if let Some(value) = form_stamp {
            form.push(("_hymical_stamp", value));
        }
        let (status, receipt) = post(&app, "rules", &form).await;
        assert_eq!(status, 202);
        let id = receipt["submission_id"].as_str().unwrap().to_string();
        assert_eq!(
            submission(&app, &key, &id).await["spamReasons"],
            json!([reason])
        );
        spam_ids.push(id);
    }

    // The folders: the inbox holds the accepted one, the spam folder the rest; the
    // endpoint's own listing is its inbox.
    let accepted_id = accepted["submission_id"].as_str().unwrap().to_string();
    assert_eq!(
        folder(&app, &key, "rules", "INBOX").await,
        vec![accepted_id.clone()]
    );
    let mut in_spam = folder(&app, &key, "rules", "SPAM").await;
    in_spam.sort();
    spam_ids.sort();
    assert_eq!(in_spam, spam_ids);
    assert_eq!(
        folder(&app, &key, "rules", "ALL").await.len(),
        spam_ids.len() + 1
    );
    let listed = data(
        app.gql(
            &key,
            "{ endpoint(id: \"rules\") { submissions { edges { node { id } } } } }",
            json!({}),
        )
        .await,
    );
    assert_eq!(
        listed["endpoint"]["submissions"]["edges"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (submissions, deliveries) = app.stored_counts().await;
    assert_eq!((submissions, deliveries), (spam_ids.len() as i64 + 1, 1));

    // An idempotent retry of spam answers as the first answer did.
    let form = [("message", "casino again")];
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&form)
        .finish();
    let mut receipts = Vec::new();
    for _ in 0..2 {
        let response = app
            .post_form(
                "rules",
                Some("application/x-www-form-urlencoded"),
                body.clone(),
                &[("idempotency-key", "spam-retry-key-0001")],
            )
            .await;
        assert_eq!(response.status(), 202);
        receipts.push(response.json::<Value>().await.unwrap());
    }
    assert_eq!(receipts[0]["submission_id"], receipts[1]["submission_id"]);
    assert_eq!(receipts[1]["idempotent_replay"], true);
    assert_eq!(receipts[1]["delivery"]["queued"], true);
}

#[tokio::test]
async fn not_spam_queues_each_delivery_once_and_spam_is_recorded() {
    let (_fake, receiver, app, key) = started().await;
    endpoint(&app, &key, "release", &receiver.url("/first")).await;
    add_webhook(&app, &key, "release", "http://127.0.0.1:1/unused").await;
    data(
        protect(
            &app,
            &key,
            json!({ "endpointId": "release", "blockedWords": ["casino"] }),
        )
        .await,
    );
    let (_, receipt) = post(&app, "release", &[("message", "casino night")]).await;
    let id = receipt["submission_id"].as_str().unwrap().to_string();
    assert_eq!(submission(&app, &key, &id).await["deliveries"], json!([]));

    let mark_not_spam = "mutation($id: ID!) { markSubmissionNotSpam(id: $id) { queuedDeliveries submission { spam spamReasons spamReviewedAt deliveries { id state } } } }";
    let first = data(app.gql(&key, mark_not_spam, json!({ "id": id })).await);
    let first = &first["markSubmissionNotSpam"];
    assert_eq!(first["queuedDeliveries"], 2, "one per destination");
    assert_eq!(first["submission"]["spam"], false);
    assert_eq!(
        first["submission"]["spamReasons"],
        json!(["a blocked word"]),
        "kept as a record"
    );
    assert!(first["submission"]["spamReviewedAt"].is_string());
    assert_eq!(
        first["submission"]["deliveries"].as_array().unwrap().len(),
        2
    );
    let again = data(app.gql(&key, mark_not_spam, json!({ "id": id })).await);
    assert_eq!(
        again["markSubmissionNotSpam"]["queuedDeliveries"], 0,
        "once"
    );
    // The first destination's delivery goes; as if it had just arrived.
    app.worker(None).run_once().await.unwrap();
    let received = receiver.wait_for(1).await;
    assert_eq!(received.len(), 1);
    let body: Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(body["submission"]["id"], id.as_str());

    // Marking it spam afterwards records it; a second "not spam" queues nothing new (it
    // has its deliveries).
    let marked = data(
        app.gql(
            &key,
            "mutation($id: ID!) { markSubmissionSpam(id: $id) { submission { spam spamReasons } } }",
            json!({ "id": id }),
        )
        .await,
    );
    assert_eq!(marked["markSubmissionSpam"]["submission"]["spam"], true);
    assert_eq!(
        marked["markSubmissionSpam"]["submission"]["spamReasons"],
        json!(["marked spam by an operator"])
    );
    let third = data(app.gql(&key, mark_not_spam, json!({ "id": id })).await);
    assert_eq!(third["markSubmissionNotSpam"]["queuedDeliveries"], 0);
    assert_eq!(app.stored_counts().await, (1, 2));
    // Unknown ids.
    let answer = app
        .gql(&key, mark_not_spam, json!({ "id": "sub_nope" }))
        .await;
    assert_eq!(error_code(&answer).0, "SUBMISSION_NOT_FOUND");
}

#[tokio::test]
async fn akismet_judges_what_the_rules_let_through_and_hears_the_verdicts() {
    let (fake, receiver, app, key) = started().await;
    endpoint(&app, &key, "akis", &receiver.url("/hook")).await;
    data(protect(&app, &key, json!({ "endpointId": "akis", "akismet": true })).await);

    let (status, ham) = post(
        &app,
        "akis",
        &[
            ("name", "Ada"),
            ("email", "ada@example.com"),
            ("message", "hello"),
        ],
    )
    .await;
    assert_eq!(status, 202);
    let (status, spam) = post(
        &app,
        "akis",
        &[("name", "Bot"), ("message", "cheap viagra")],
    )
    .await;
    assert_eq!(status, 202);
    let ham_id = ham["submission_id"].as_str().unwrap();
    let spam_id = spam["submission_id"].as_str().unwrap();
    assert_eq!(submission(&app, &key, ham_id).await["spam"], false);
    assert_eq!(
        submission(&app, &key, spam_id).await["spamReasons"],
        json!(["Akismet"])
    );
    let checks: Vec<_> = fake
        .calls()
        .into_iter()
        .filter(|(path, _)| path == "/akismet/comment-check")
        .collect();
    assert_eq!(checks.len(), 2);
    let form = &checks[0].1;
    assert_eq!(form["api_key"], AKISMET_KEY);
    assert_eq!(form["blog"], "https://forms.example");
    assert_eq!(form["user_ip"], "127.0.0.1");
    assert_eq!(form["comment_type"], "contact-form");
    assert_eq!(form["comment_author"], "Ada");
    assert_eq!(form["comment_author_email"], "ada@example.com");
    assert_eq!(form["comment_content"], "hello");

    // The operator's verdicts are reported.
    data(
        app.gql(
            &key,
            "mutation($id: ID!) { markSubmissionNotSpam(id: $id) { queuedDeliveries } }",
            json!({ "id": spam_id }),
        )
        .await,
    );
    data(
        app.gql(
            &key,
            "mutation($id: ID!) { markSubmissionSpam(id: $id) { submission { spam } } }",
            json!({ "id": ham_id }),
        )
        .await,
    );
    let reports: Vec<String> = fake
        .calls()
        .into_iter()
        .map(|(path, _)| path)
        .filter(|path| path.ends_with("submit-ham") || path.ends_with("submit-spam"))
        .collect();
    assert_eq!(reports, vec!["/akismet/submit-ham", "/akismet/submit-spam"]);

    // Akismet down: refused under the default policy, nothing stored.
    fake.akismet_down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let before = app.stored_counts().await;
    let (status, body) = post(&app, "akis", &[("message", "hello again")]).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["details"]["verifier"], "akismet");
    assert_eq!(app.stored_counts().await, before);
    // Akismet needs the server's key and the endpoint's site.
    data(
        app.gql(&key, "mutation { createEndpoint(input: { id: \"nosite\", name: \"N\" }) { endpoint { id } } }", json!({}))
            .await,
    );
    let answer = protect(
        &app,
        &key,
        json!({ "endpointId": "nosite", "akismet": true }),
    )
    .await;
    assert_eq!(error_code(&answer).1["field"], "akismet", "{answer}");
}

/// "Not spam" from two processes at once, one of them SIGKILLed right after its answer:
/// every destination gets exactly one delivery, delivered once by the survivor.
#[tokio::test]
async fn not_spam_delivers_once_across_processes_and_a_sigkill() {
    let (_fake, receiver, app, key) = started().await;
    endpoint(&app, &key, "crash", &receiver.url("/one")).await;
    add_webhook(&app, &key, "crash", &receiver.url("/two")).await;
    data(
        protect(
            &app,
            &key,
            json!({ "endpointId": "crash", "blockedWords": ["casino"] }),
        )
        .await,
    );
    let mut ids = Vec::new();
    for n in 0..10 {
        let (_, receipt) = post(&app, "crash", &[("message", &format!("casino {n}"))]).await;
        ids.push(receipt["submission_id"].as_str().unwrap().to_string());
    }
    let vars = [
        ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_WORKER_POLL_SECONDS", "0.05"),
    ];
    // The API-only process is the one killed: nothing of its own is in flight but the
    // commit of its verdicts.
    let mut api_only = vars.to_vec();
    api_only.push(("FORMS_WORKER_ENABLED", "false"));
    let doomed = ServeProcess::start(&app.db, &api_only);
    let survivor = ServeProcess::start(&app.db, &vars);
    wait_for_status(&doomed.url("/health"), 200).await;
    wait_for_status(&survivor.url("/health"), 200).await;
    let http = reqwest::Client::new();
    let mark = |url: String, id: String| {
        let http = http.clone();
        let key = key.clone();
        async move {
            let data = graphql_data(
                &http,
                &url,
                &key,
                "mutation($id: ID!) { markSubmissionNotSpam(id: $id) { queuedDeliveries } }",
                json!({ "id": id }),
            )
            .await;
            data["markSubmissionNotSpam"]["queuedDeliveries"]
                .as_i64()
                .unwrap_or_else(|| panic!("{data}"))
        }
    };
    let mut queued = 0;
    for id in &ids {
        let (a, b) = tokio::join!(
            mark(doomed.url("/graphql"), id.clone()),
            mark(survivor.url("/graphql"), id.clone())
        );
        queued += a + b;
    }
    doomed.kill();
    assert_eq!(
        queued, 20,
        "two destinations, ten submissions, each queued once"
    );
    let received = receiver.wait_for(20).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = if receiver.received().len() > received.len() {
        receiver.received()
    } else {
        received
    };
    assert_eq!(received.len(), 20, "each delivery once");
    let mut per_delivery: HashMap<String, usize> = HashMap::new();
    for request in &received {
        let id = request.headers["webhook-id"].to_str().unwrap().to_string();
        *per_delivery.entry(id).or_default() += 1;
    }
    assert!(per_delivery.values().all(|&n| n == 1), "{per_delivery:?}");
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'delivered'")
            .await,
        20
    );
    let (status, log) = survivor.stop();
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn spam_has_its_own_retention() {
    let db = support::harness::TestDb::new().await;
    let app = TestApp::start_on(db.clone(), &[], Arc::new(SystemClock)).await;
    let mut conn = app.db.connect().await;
    diesel_async::SimpleAsyncConnection::batch_execute(
        &mut conn,
        &format!(
            "INSERT INTO endpoints (id, name) VALUES ('ret', 'Ret');
             INSERT INTO submissions (id, endpoint_id, received_at, fields, spam, spam_reasons) VALUES
                 ('sub_{a}', 'ret', now() - interval '40 days', '{{}}', true, '{{rule}}'),
                 ('sub_{b}', 'ret', now() - interval '10 days', '{{}}', true, '{{rule}}'),
                 ('sub_{c}', 'ret', now() - interval '40 days', '{{}}', false, '{{}}');",
            a = "a".repeat(32),
            b = "b".repeat(32),
            c = "c".repeat(32),
        ),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let output = support::harness::forms_command(dir.path())
        .env("FORMS_DATABASE_URL", db.url.expose())
        .env("FORMS_SPAM_RETENTION_DAYS", "30")
        .args(["retention", "--older-than-days", "365"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("deleted 1 "), "{stdout}");
    let left = app.db.count("SELECT count(*) AS n FROM submissions").await;
    assert_eq!(left, 2, "only the spam older than 30 days went");
    assert_eq!(
        app.db
            .count(&format!(
                "SELECT count(*) AS n FROM submissions WHERE id = 'sub_{}'",
                "a".repeat(32)
            ))
            .await,
        0
    );
}

/// The page's form stamp field, once it holds a value other than `other`.
async fn stamp_other_than(client: &fantoccini::Client, other: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let value = client
            .execute(
                "return document.querySelector('input[name=_hymical_stamp]').value;",
                vec![],
            )
            .await
            .unwrap();
        if let Some(value) = value.as_str().filter(|v| !v.is_empty() && *v != other) {
            return value.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new stamp arrived (still {value})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// In real headless Chromium: a page on another origin with a multipart form, a stand-in
/// captcha widget (it writes a token into the provider's field, as Turnstile's script
/// does) and the form stamp script of the snippet the console generates, submitted by a
/// click: accepted and redirected. Back on the form (from the back/forward cache or
/// loaded again), a second submission from the same page, sent at once, is accepted too:
/// the snippet renewed its single-use stamp, keeping the page's time. Then the console's
/// spam folder lists a spam submission, and "Not spam" on its page delivers it.
#[tokio::test(flavor = "multi_thread")]
async fn a_browser_form_with_a_captcha_gets_through_and_the_console_releases_spam() {
    use fantoccini::Locator;

    let (fake, receiver, app, key) = started().await;
    let driver = support::browser::start_driver().await;
    let client = support::browser::browser(&driver).await;

    // The stamp field and its script, as the console's snippet has them.
    client.goto(&app.url("/console")).await.unwrap();
    let snippet = client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             import('/console/assets/endpoints.js')
               .then((m) => done(m.formSnippet({ id: 'web', spamProtection: { minFillSeconds: 1 } })))
               .catch((e) => done('failed: ' + e));",
            vec![],
        )
        .await
        .unwrap();
    let snippet = snippet.as_str().unwrap().to_string();
    let start = snippet
        .find("  <input type=\"hidden\" name=\"_hymical_stamp\">")
        .unwrap_or_else(|| panic!("{snippet}"));
    let end = snippet.find("  </script>").unwrap() + "  </script>".len();
    let stamp_script = &snippet[start..end];

    // The static site: the form page and its thank-you page.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site = format!("http://{}", listener.local_addr().unwrap());
    let action = app.url("/f/web");
    assert!(
        stamp_script.contains(&format!("{action}/stamp")),
        "{snippet}"
    );
    let page = format!(
        r#"<!doctype html><html><body>
<form id="contact" action="{action}" method="post" enctype="multipart/form-data">
  <label>Email <input name="email" type="email" value="ada@example.com"></label>
  <label>Message <textarea name="message">Hello from a browser</textarea></label>
  <div class="cf-turnstile" data-sitekey="YOUR_SITE_KEY"></div>
{stamp_script}
  <button type="submit" id="send">Send</button>
</form>
<script>
  // The stand-in for the provider's widget script.
  var token = document.createElement("input");
  token.type = "hidden";
  token.name = "cf-turnstile-response";
  token.value = "pass:127.0.0.1#" + Date.now();
  document.querySelector(".cf-turnstile").appendChild(token);
</script>
</body></html>"#
    );
    let router = Router::new()
        .route(
            "/form",
            routing::get(move || async move { axum::response::Html(page) }),
        )
        .route(
            "/thanks",
            routing::get(|| async { axum::response::Html("<h1 id=\"thanks\">Thanks!</h1>") }),
        );
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });

    data(
        app.gql(
            &key,
            "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }",
            json!({ "input": {
                "id": "web", "name": "Web", "webhookUrl": receiver.url("/hook"),
                "allowedOrigins": [site], "redirectUrl": format!("{site}/thanks")
            } }),
        )
        .await,
    );
    data(
        protect(
            &app,
            &key,
            json!({
                "endpointId": "web",
                "captcha": { "provider": "TURNSTILE", "secret": SECRET },
                "minFillSeconds": 1,
                "blockedWords": ["casino"],
            }),
        )
        .await,
    );

    client.goto(&format!("{site}/form")).await.unwrap();
    // The stamp arrives from the service (another origin) and the form waits a second.
    let first = stamp_other_than(&client, "").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    send_and_wait_for_thanks(&client).await;

    // Back on the form, the snippet has another stamp for it; the visitor solves the
    // captcha again and sends the form once more, at once: not spent, not too soon.
    client.back().await.unwrap();
    let second = stamp_other_than(&client, &first).await;
    assert_eq!(
        second.split('.').next(),
        first.split('.').next(),
        "the renewed stamp keeps the time the page was served"
    );
    client
        .execute(
            "document.querySelector('input[name=cf-turnstile-response]').value = 'pass:127.0.0.1#' + Date.now();",
            vec![],
        )
        .await
        .unwrap();
    send_and_wait_for_thanks(&client).await;

    let listed = data(
        app.gql(&key, "{ submissions(filter: {folder: ALL}) { edges { node { id spam spamReasons fields { name values } } } } }", json!({}))
            .await,
    );
    let edges = listed["submissions"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 2, "{listed}");
    for edge in edges {
        let node = &edge["node"];
        assert_eq!(node["spam"], false, "{listed}");
        assert_eq!(
            node["fields"],
            json!([
                { "name": "email", "values": ["ada@example.com"] },
                { "name": "message", "values": ["Hello from a browser"] },
            ]),
            "neither the token nor the stamp is stored"
        );
    }
    let (called, form) = fake.calls().last().unwrap().clone();
    assert_eq!(called, "/turnstile");
    assert!(form["response"].starts_with("pass:127.0.0.1#"));

    // A spam submission, released from the console.
    let (_, receipt) = post_from(
        &app,
        "web",
        &site,
        &[
            ("message", "casino"),
            ("cf-turnstile-response", "pass:127.0.0.1#spam"),
        ],
    )
    .await;
    let spam_id = receipt["submission_id"].as_str().unwrap().to_string();
    support::browser::sign_in(&client, &app.url("/console"), &key).await;
    client
        .goto(&format!("{}#/submissions?folder=spam", app.url("/console")))
        .await
        .unwrap();
    support::browser::wait_for_text(&client, "#view h1", "Spam folder").await;
    let row = format!("#submissions tr[data-submission='{spam_id}']");
    support::browser::wait_for_text(&client, &row, "spam: not delivered").await;
    client
        .goto(&format!("{}#/submissions/{spam_id}", app.url("/console")))
        .await
        .unwrap();
    support::browser::wait_for_text(
        &client,
        "#spam-verdict",
        "in the spam folder, not delivered (a blocked word; no form stamp)",
    )
    .await;
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("#mark-not-spam"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    support::browser::wait_for_text(&client, "#flash", "1 delivery queued").await;
    support::browser::wait_for_text(&client, "#spam-verdict", "not spam").await;
    assert_eq!(
        submission(&app, &key, &spam_id).await["deliveries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let _ = client.close().await;
}

/// [`post`] from another origin.
async fn post_from(
    app: &TestApp,
    endpoint: &str,
    origin: &str,
    form: &[(&str, &str)],
) -> (u16, Value) {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let response = app
        .post_form(
            endpoint,
            Some("application/x-www-form-urlencoded"),
            body,
            &[("origin", origin)],
        )
        .await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// An app pointed at the fake, with `FORMS_SPAM_SCREENING_BUDGET_SECONDS` set.
async fn app_with_budget(fake: &FakeVerifier, budget: &str) -> TestApp {
    let mut vars = fake.vars();
    vars.push(("FORMS_SPAM_SCREENING_BUDGET_SECONDS", budget.into()));
    start_with_vars(vars, Arc::new(SystemClock)).await
}

/// The fake verifier, a receiver, an app whose rules may take `budget` seconds, an admin
/// key, and endpoint `id` (its webhook to the receiver) screened by [`costly_patterns`].
async fn costly_endpoint(budget: &str, id: &str) -> (FakeVerifier, Receiver, TestApp, String) {
    let fake = FakeVerifier::start().await;
    let app = app_with_budget(&fake, budget).await;
    let (_, key) = app.create_key("ops").await;
    let receiver = Receiver::start().await;
    endpoint(&app, &key, id, &receiver.url("/hook")).await;
    data(
        protect(
            &app,
            &key,
            json!({ "endpointId": id, "blockedPatterns": costly_patterns() }),
        )
        .await,
    );
    (fake, receiver, app, key)
}

/// Patterns that cost the rules real work on a large value: no literal to look for
/// first, and Unicode word boundaries over text that is not ASCII, so each one walks
/// the whole value.
fn costly_patterns() -> Vec<String> {
    (2..12)
        .map(|n| format!(r"\b\w+\s+\w+\s+\w+\s+\d{{{n}}}\b"))
        .collect()
}

/// A form of 4 values of 16,000 characters that none of [`costly_patterns`] matches.
fn large_form() -> Vec<(String, String)> {
    let value: String = "lorem ipsum dolé sit amet "
        .chars()
        .cycle()
        .take(16_000)
        .collect();
    (0..4)
        .map(|i| (format!("field{i}"), value.clone()))
        .collect()
}

/// Each way around the local rules found from outside is caught through `POST /f/{id}`:
/// the submission lands in the spam folder, answered as an accepted one, nothing
/// delivered (docs/intake.md, "The rules", what is normalised).
#[tokio::test]
async fn normalised_bypasses_land_in_the_spam_folder() {
    let (_fake, receiver, app, key) = started().await;
    endpoint(&app, &key, "norm", &receiver.url("/hook")).await;
    data(
        protect(
            &app,
            &key,
            json!({
                "endpointId": "norm",
                "maxLinks": 0,
                // The operator's own rule written with a Cyrillic а: normalised too.
                "blockedWords": ["vi\u{0430}gra"],
                "blockedPatterns": ["^buy\\s+casino"],
                "blockedSenders": ["spam.example."],
            }),
        )
        .await,
    );
    let cases: &[(&str, &str, &str)] = &[
        ("message", "buy_viagra", "a blocked word"),
        ("message", "vi\u{200B}agra", "a blocked word"),
        ("message", "vi\u{0430}gra", "a blocked word"),
        ("message", "v\u{00ED}agra", "a blocked word"),
        ("message", "v\u{0301}iagra", "a blocked word"),
        (
            "message",
            "\u{FF56}\u{FF49}\u{FF41}\u{FF47}\u{FF52}\u{FF41}",
            "a blocked word",
        ),
        (
            "message",
            "buy c\u{0430}s\u{0456}n\u{043E}",
            "blocked pattern 1",
        ),
        ("email", "x@spam.example.", "blocked sender spam.example"),
        (
            "message",
            "\u{FF48}\u{FF54}\u{FF54}\u{FF50}\u{FF53}://a.example",
            "1 links, more than the 0 allowed",
        ),
        (
            "message",
            "see //a.example",
            "1 links, more than the 0 allowed",
        ),
    ];
    let mut spam_ids = Vec::new();
    for (field, value, reason) in cases {
        let (status, receipt) = post(&app, "norm", &[(*field, *value)]).await;
        assert_eq!(status, 202, "{reason}: {receipt}");
        assert_eq!(receipt["delivery"]["queued"], true, "answered as accepted");
        let id = receipt["submission_id"].as_str().unwrap().to_string();
        let stored = submission(&app, &key, &id).await;
        assert_eq!(stored["spam"], true, "{value:?} is caught");
        assert_eq!(stored["spamReasons"], json!([reason]), "{value:?}");
        assert_eq!(stored["deliveries"], json!([]), "no delivery for spam");
        // What is stored is what was sent, not its normal form.
        assert_eq!(stored["fields"][0]["values"], json!([value]));
        spam_ids.push(id);
    }
    let (status, receipt) = post(&app, "norm", &[("message", "hello, no links")]).await;
    assert_eq!(status, 202);
    let accepted = submission(&app, &key, receipt["submission_id"].as_str().unwrap()).await;
    assert_eq!(accepted["spam"], false);
    let mut in_spam = folder(&app, &key, "norm", "SPAM").await;
    in_spam.sort();
    spam_ids.sort();
    assert_eq!(in_spam, spam_ids);
}

/// Costly rules run beside the runtime, not on it: on this test's single-threaded
/// runtime, which also serves the app, the test sees submissions being judged and
/// `/health` answers while they are (judged on the request's task, nothing else of
/// this thread would run until they were done).
#[tokio::test]
async fn costly_rules_run_off_the_runtime_and_health_answers_meanwhile() {
    let (_fake, _receiver, app, key) = costly_endpoint("600", "costly").await;
    let form = large_form();
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let screening = &app.app.intake.screening;
    let watch = async {
        // Bounded: at most 6,000 looks.
        let mut seen = false;
        for _ in 0..6000 {
            if screening.judging_now() >= 1 {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            seen,
            "the test never ran while a submission was being judged"
        );
        let health = app.http.get(app.url("/health")).send().await.unwrap();
        assert_eq!(health.status(), 200);
        assert!(
            screening.judging_now() >= 1,
            "/health answered while submissions were being judged"
        );
    };
    let (first, second, third, ()) = tokio::join!(
        post(&app, "costly", &form),
        post(&app, "costly", &form),
        post(&app, "costly", &form),
        watch
    );
    for (status, receipt) in [first, second, third] {
        assert_eq!(status, 202, "{receipt}");
        let stored = submission(&app, &key, receipt["submission_id"].as_str().unwrap()).await;
        assert_eq!(
            stored["spam"], false,
            "the rules finished and let it through"
        );
    }
    assert_eq!(screening.judging_now(), 0);
}

/// Rules that give no verdict within `FORMS_SPAM_SCREENING_BUDGET_SECONDS` follow the
/// endpoint's policy for a verifier that gives none: `REFUSE` answers 503 and stores
/// nothing; `SPAM` files the submission in the spam folder.
#[tokio::test]
async fn rules_past_their_budget_follow_the_verifier_policy() {
    let (_fake, _receiver, app, key) = costly_endpoint("0.001", "budget").await;
    let form = large_form();
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let before = app.stored_counts().await;
    let (status, body) = post(&app, "budget", &form).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "verifier_unavailable");
    assert_eq!(body["error"]["details"]["verifier"], "screening");
    assert_eq!(app.stored_counts().await, before, "refused: nothing stored");

    data(
        protect(
            &app,
            &key,
            json!({
                "endpointId": "budget",
                "blockedPatterns": costly_patterns(),
                "whenVerifierUnreachable": "SPAM",
            }),
        )
        .await,
    );
    let answer = post(&app, "budget", &form).await;
    assert_filed_as_spam(&app, &key, answer, "the spam rules did not finish in time").await;
}

/// Clicks the page's send button and waits for its thanks.
async fn send_and_wait_for_thanks(client: &fantoccini::Client) {
    client
        .find(fantoccini::Locator::Css("#send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    support::browser::wait_for_text(client, "#thanks", "Thanks!").await;
}
