//! Form stamps (`GET /f/{id}/stamp`) are single-use and expire, across processes; a
//! captcha token is one token however much white space surrounds it (docs/intake.md,
//! "Spam").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing;
use axum::{Form, Router};
use chrono::{TimeZone, Utc};
use hymical_forms::testing::clock::{ManualClock, SystemClock};
use serde_json::{json, Value};

use support::harness::{data, serve_on_loopback, TestApp, TestDb};

const SECRET: &str = "test-captcha-secret";

const VARS: &[(&str, &str)] = &[("FORMS_RATE_LIMIT_ENABLED", "false")];

async fn protect(app: &TestApp, key: &str, input: Value) {
    data(
        app.gql(
            key,
            "mutation($input: SetSpamProtectionInput!) { setSpamProtection(input: $input) { spamProtection { minFillSeconds } } }",
            json!({ "input": input }),
        )
        .await,
    );
}

/// The endpoint "stamped", protected with `min_fill_seconds`; answers the key that set it.
async fn stamped_endpoint(app: &TestApp, min_fill_seconds: u64) -> String {
    let (_, key) = app.create_key("stamps").await;
    app.insert_endpoint(&support::harness::endpoint("stamped"))
        .await;
    protect(
        app,
        &key,
        json!({ "endpointId": "stamped", "minFillSeconds": min_fill_seconds }),
    )
    .await;
    key
}

/// Posts a urlencoded form; answers the status and body.
async fn post(app: &TestApp, endpoint: &str, form: &[(&str, &str)]) -> (u16, Value) {
    app.post_urlencoded(endpoint, form, &[]).await
}

/// A stored submission's spam reasons.
async fn spam_reasons(app: &TestApp, key: &str, receipt: &Value) -> Value {
    let id = receipt["submission_id"].as_str().unwrap();
    data(
        app.gql(
            key,
            "query($id: ID!) { submission(id: $id) { spamReasons } }",
            json!({ "id": id }),
        )
        .await,
    )["submission"]["spamReasons"]
        .clone()
}

/// Posts message `m` with `stamp` to the endpoint "stamped" through `poster`: accepted
/// (a spent or expired stamp lands in the spam folder, it is not refused). Answers the
/// stored submission's spam reasons, read through `app` with `key`.
async fn stamped_post(app: &TestApp, poster: &TestApp, key: &str, m: &str, stamp: &str) -> Value {
    let (status, receipt) = post(poster, "stamped", &[("m", m), ("_hymical_stamp", stamp)]).await;
    assert_eq!(status, 202, "{receipt}");
    spam_reasons(app, key, &receipt).await
}

/// A form stamp for `endpoint`, fetched as the snippet does when its page loads.
async fn form_stamp(app: &TestApp, endpoint: &str) -> String {
    let stamp = app.form_stamp(endpoint, &[]).await;
    stamp["value"].as_str().unwrap().to_string()
}

/// A stamp vouches for one submission: the same stamp again, in this process or in
/// another on the same database, lands in the spam folder ("form stamp used before").
/// A stamp served more than `FORMS_FORM_STAMP_MAX_AGE_SECONDS` ago is expired. Every
/// stamp served is another, even within one second.
#[tokio::test(flavor = "multi_thread")]
async fn a_form_stamp_is_spent_once_and_expires() {
    let start = Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let db = TestDb::new().await;
    let vars = [VARS, &[("FORMS_FORM_STAMP_MAX_AGE_SECONDS", "7200")]].concat();
    let app = TestApp::start_on(db.clone(), &vars, clock.clone()).await;
    let other = TestApp::start_on(db, &vars, clock.clone()).await;
    let key = stamped_endpoint(&app, 3).await;

    let stamp = form_stamp(&app, "stamped").await;
    assert_ne!(
        stamp,
        form_stamp(&app, "stamped").await,
        "each stamp is new"
    );
    clock.advance(chrono::Duration::seconds(5));
    assert_eq!(stamped_post(&app, &app, &key, "1", &stamp).await, json!([]));
    for process in [&app, &other] {
        let reasons = stamped_post(&app, process, &key, "2", &stamp).await;
        assert_eq!(reasons, json!(["form stamp used before"]));
    }

    // Two hours and a second after it was served, a stamp has expired (and is not
    // spent: it is refused for its age, whoever sends it).
    let old = form_stamp(&other, "stamped").await;
    clock.advance(chrono::Duration::seconds(7201));
    for process in [&app, &other] {
        let reasons = stamped_post(&app, process, &key, "3", &old).await;
        assert_eq!(reasons, json!(["form stamp expired"]));
    }
    // A fresh one is fine again.
    let fresh = form_stamp(&app, "stamped").await;
    clock.advance(chrono::Duration::seconds(4));
    assert_eq!(
        stamped_post(&app, &other, &key, "4", &fresh).await,
        json!([])
    );
}

/// `GET /f/{id}/stamp` with `query`: the status, the `Retry-After` header and the body.
async fn get_stamp(app: &TestApp, endpoint: &str, query: &str) -> (u16, Option<String>, Value) {
    let response = app
        .http
        .get(app.url(&format!("/f/{endpoint}/stamp{query}")))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry_after, response.json().await.unwrap())
}

/// Every stamp served is counted against the per-source rate limit, as a submission is:
/// past it the stamp is refused with the same `429`, so that the rows one source can
/// make `form_stamps_spent` keep (one per stamp spent, kept for the age limit) are
/// bounded by its limit. A client alternating stamps and submissions gets as many stamps
/// as its limit allows, and no more rows than stamps.
#[tokio::test(flavor = "multi_thread")]
async fn form_stamps_count_against_the_source_limit() {
    let clock = Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap(),
    ));
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "4"),
            ("FORMS_RATE_LIMIT_IP_WINDOW_SECONDS", "3600"),
        ],
        clock.clone(),
    )
    .await;
    let key = stamped_endpoint(&app, 1).await;

    let mut served = 0;
    let mut accepted = 0;
    for n in 0..20 {
        let (status, retry_after, body) = get_stamp(&app, "stamped", "").await;
        if status == 429 {
            assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
            assert_eq!(body["error"]["details"]["scope"], "ip", "{body}");
            assert_eq!(body["error"]["details"]["limit"], 4, "{body}");
            let seconds = body["error"]["details"]["retry_after_seconds"]
                .as_u64()
                .unwrap();
            assert_eq!(retry_after, Some(seconds.to_string()));
            continue;
        }
        assert_eq!(status, 200, "{body}");
        served += 1;
        clock.advance(chrono::Duration::seconds(2));
        let stamp = body["value"].as_str().unwrap();
        let (status, receipt) = post(
            &app,
            "stamped",
            &[("n", &n.to_string()), ("_hymical_stamp", stamp)],
        )
        .await;
        if status == 202 {
            accepted += 1;
            assert_eq!(spam_reasons(&app, &key, &receipt).await, json!([]));
        } else {
            assert_eq!(status, 429, "{receipt}");
        }
    }
    // Stamp, post, stamp, post: the limit of 4 is spent; the 16 stamps after it were
    // refused, and wrote nothing.
    assert_eq!((served, accepted), (2, 2));
    let spent = app
        .db
        .count("SELECT count(*) AS n FROM form_stamps_spent")
        .await;
    assert_eq!(spent, 2, "one row per stamp served, no more");

    // A new window gives the source its limit again.
    clock.advance(chrono::Duration::seconds(3600));
    let (status, _, body) = get_stamp(&app, "stamped", "").await;
    assert_eq!(status, 200, "{body}");
}

/// `?renew=` with an earlier stamp of the endpoint (spent or not, not expired) serves a
/// new stamp, with a new nonce, that keeps the earlier one's time: the snippet asks for
/// one after each submission, so that a second submission from the same page is neither
/// spent nor sent too soon. Anything else to renew gets a stamp served now.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_stamp_keeps_the_time_the_page_was_served() {
    let start = Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let vars = [VARS, &[("FORMS_FORM_STAMP_MAX_AGE_SECONDS", "7200")]].concat();
    let app = TestApp::start_with(&vars, clock.clone()).await;
    let key = stamped_endpoint(&app, 3).await;
    app.insert_endpoint(&support::harness::endpoint("other"))
        .await;
    let seconds = |stamp: &str| stamp.split('.').next().unwrap().to_string();

    let stamp = form_stamp(&app, "stamped").await;
    clock.advance(chrono::Duration::seconds(5));
    assert_eq!(stamped_post(&app, &app, &key, "1", &stamp).await, json!([]));

    // Renewed at once after the submission, and sent at once: as old as the page.
    let (status, _, body) = get_stamp(&app, "stamped", &format!("?renew={stamp}")).await;
    assert_eq!(status, 200, "{body}");
    let renewed = body["value"].as_str().unwrap().to_string();
    assert_ne!(renewed, stamp);
    assert_eq!(seconds(&renewed), seconds(&stamp));
    assert_eq!(
        stamped_post(&app, &app, &key, "2", &renewed).await,
        json!([])
    );
    // The renewed stamp is single-use too.
    assert_eq!(
        stamped_post(&app, &app, &key, "3", &renewed).await,
        json!(["form stamp used before"])
    );

    // Not a stamp of this endpoint, altered, or expired: a stamp served now.
    let now = (start + chrono::Duration::seconds(5))
        .timestamp()
        .to_string();
    let foreign = form_stamp(&app, "other").await;
    let altered = format!("1.{}", renewed.split_once('.').unwrap().1);
    for earlier in [foreign.as_str(), altered.as_str(), "nonsense", ""] {
        let (status, _, body) = get_stamp(&app, "stamped", &format!("?renew={earlier}")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(seconds(body["value"].as_str().unwrap()), now, "{earlier}");
    }
    clock.advance(chrono::Duration::seconds(7201));
    let (_, _, body) = get_stamp(&app, "stamped", &format!("?renew={stamp}")).await;
    assert_eq!(
        seconds(body["value"].as_str().unwrap()),
        (start + chrono::Duration::seconds(7206))
            .timestamp()
            .to_string(),
        "an expired stamp is not renewed"
    );
}

/// A `siteverify` on loopback that, as the real providers do, ignores white space around
/// the token: `pass:{host}…` succeeds on that host, anything else fails. It records the
/// tokens it was asked about.
#[derive(Clone, Default)]
struct Provider {
    addr: Option<SocketAddr>,
    asked: Arc<Mutex<Vec<String>>>,
}

async fn siteverify(
    State(provider): State<Provider>,
    Form(form): Form<HashMap<String, String>>,
) -> axum::Json<Value> {
    let token = form.get("response").cloned().unwrap_or_default();
    provider.asked.lock().unwrap().push(token.clone());
    let host = token
        .trim()
        .strip_prefix("pass:")
        .and_then(|rest| rest.split('#').next());
    match (form.get("secret").map(String::as_str), host) {
        (Some(SECRET), Some(host)) => axum::Json(json!({ "success": true, "hostname": host })),
        _ => axum::Json(json!({ "success": false })),
    }
}

impl Provider {
    async fn start() -> Provider {
        let mut provider = Provider::default();
        let router = Router::new()
            .route("/turnstile", routing::post(siteverify))
            .with_state(provider.clone());
        provider.addr = Some(serve_on_loopback(router).await);
        provider
    }
}

/// `t` and `t ` (or `\tt\r\n`) are one token: spent by the first submission, `reused`
/// for the others, and the provider is asked about the token without the white space.
/// White space inside a token makes it no token (`rejected`, the provider not asked).
#[tokio::test(flavor = "multi_thread")]
async fn a_captcha_token_with_white_space_around_it_is_the_same_token() {
    let provider = Provider::start().await;
    let url = format!("http://{}/turnstile", provider.addr.unwrap());
    let vars = [
        VARS,
        &[("FORMS_CAPTCHA_TURNSTILE_VERIFY_URL", url.as_str())],
    ]
    .concat();
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("captcha").await;
    app.insert_endpoint(&support::harness::endpoint("guarded"))
        .await;
    protect(
        &app,
        &key,
        json!({ "endpointId": "guarded", "captcha": { "provider": "TURNSTILE", "secret": SECRET } }),
    )
    .await;
    let token = "pass:forms.example#1";
    let (status, receipt) = post(
        &app,
        "guarded",
        &[("m", "1"), ("cf-turnstile-response", token)],
    )
    .await;
    assert_eq!(status, 202, "{receipt}");
    for spelling in [
        "pass:forms.example#1 ",
        " pass:forms.example#1",
        "\tpass:forms.example#1\r\n",
    ] {
        let (status, body) = post(
            &app,
            "guarded",
            &[("m", "2"), ("cf-turnstile-response", spelling)],
        )
        .await;
        assert_eq!(status, 403, "{spelling:?}: {body}");
        assert_eq!(body["error"]["code"], "captcha_failed");
        assert_eq!(body["error"]["details"]["reason"], "reused", "{spelling:?}");
    }
    let (status, body) = post(
        &app,
        "guarded",
        &[
            ("m", "3"),
            ("cf-turnstile-response", "pass:forms.example #2"),
        ],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["details"]["reason"], "rejected");
    let asked = provider.asked.lock().unwrap().clone();
    assert!(asked.iter().all(|t| t == token), "{asked:?}");
    assert_eq!(app.stored_counts().await.0, 1);
}

/// A spent stamp is remembered until it would have expired, and forgotten by the upkeep's
/// statement only after that.
#[tokio::test(flavor = "multi_thread")]
async fn spent_stamps_are_forgotten_only_once_expired() {
    use hymical_forms::testing::db::spam::{forget_spent_form_stamps, spend_form_stamp};
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let until = Utc.with_ymd_and_hms(2026, 12, 8, 9, 1, 0).unwrap();
    let digest = "a".repeat(64);
    assert!(spend_form_stamp(&mut conn, &digest, until).await.unwrap());
    assert!(!spend_form_stamp(&mut conn, &digest, until).await.unwrap());
    let second = chrono::Duration::seconds(1);
    assert_eq!(
        forget_spent_form_stamps(&mut conn, until - second, 10)
            .await
            .unwrap(),
        0
    );
    assert!(!spend_form_stamp(&mut conn, &digest, until).await.unwrap());
    assert_eq!(
        forget_spent_form_stamps(&mut conn, until + second, 10)
            .await
            .unwrap(),
        1
    );
}
