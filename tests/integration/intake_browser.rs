//! Browser extras of public intake: redirect, CORS, preflight, origin refusal, honeypot,
//! and a fuzz-style property test over HTTP.

use std::sync::Arc;

use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use proptest::prelude::*;
use serde_json::Value;

use support::harness::{endpoint, webhook, webhook_secret, TestApp};

const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
const FIREFOX_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

#[tokio::test(flavor = "multi_thread")]
async fn a_browser_post_is_redirected_with_303() {
    let app = TestApp::start().await;
    let mut contact = endpoint("contact");
    contact.redirect_url = Some("https://site.example/thanks".into());
    app.insert_endpoint(&contact).await;

    let response = app
        .post_form("contact", FORM, "a=1", &[("accept", FIREFOX_ACCEPT)])
        .await;
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()["location"],
        "https://site.example/thanks"
    );

    let response = app
        .post_form("contact", FORM, "a=1", &[("accept", "application/json")])
        .await;
    assert_eq!(
        response.status(),
        202,
        "a script asking for JSON gets the receipt"
    );
    let response = app.post_form("contact", FORM, "a=1", &[]).await;
    assert_eq!(response.status(), 202);
    assert_eq!(app.stored_counts().await.0, 3);

    // Errors stay JSON for browsers too.
    let response = app
        .post_form("contact", FORM, "", &[("accept", FIREFOX_ACCEPT)])
        .await;
    assert_eq!(response.status(), 422);
}

#[tokio::test(flavor = "multi_thread")]
async fn cors_with_and_without_an_origin_list() {
    let app = TestApp::start().await;
    let mut guarded = endpoint("guarded");
    guarded.allowed_origins = vec![
        Some("https://site.example".into()),
        Some("https://www.site.example".into()),
    ];
    app.insert_endpoint(&guarded).await;
    app.insert_endpoint(&endpoint("open")).await;

    let response = app
        .post_form(
            "guarded",
            FORM,
            "a=1",
            &[("origin", "https://www.site.example")],
        )
        .await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://www.site.example"
    );
    assert_eq!(response.headers()["vary"], "origin");

    let response = app
        .post_form(
            "guarded",
            FORM,
            "a=1",
            &[("origin", "https://evil.example")],
        )
        .await;
    assert_eq!(response.status(), 403);
    assert!(response
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "origin_not_allowed");

    // Without an Origin header (a server-side script), a listed endpoint still accepts.
    assert_eq!(
        app.post_form("guarded", FORM, "a=1", &[]).await.status(),
        202
    );

    let response = app
        .post_form("open", FORM, "a=1", &[("origin", "https://anyone.example")])
        .await;
    assert_eq!(response.status(), 202);
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    assert_eq!(app.stored_counts().await.0, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn preflight() {
    let app = TestApp::start().await;
    let mut guarded = endpoint("guarded");
    guarded.allowed_origins = vec![Some("https://site.example".into())];
    app.insert_endpoint(&guarded).await;
    let preflight = |id: &'static str, origin: &'static str| {
        app.http
            .request(reqwest::Method::OPTIONS, app.url(&format!("/f/{id}")))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, idempotency-key",
            )
            .send()
    };
    let response = preflight("guarded", "https://site.example").await.unwrap();
    assert_eq!(response.status(), 204);
    let headers = response.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://site.example"
    );
    assert_eq!(headers["access-control-allow-methods"], "POST");
    let allowed = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("content-type") && allowed.contains("idempotency-key"));
    assert_eq!(headers["vary"], "origin");

    let response = preflight("guarded", "https://evil.example").await.unwrap();
    assert_eq!(response.status(), 403);
    assert!(response
        .headers()
        .get("access-control-allow-origin")
        .is_none());

    let response = preflight("nowhere", "https://site.example").await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(app.stored_counts().await, (0, 0));
}

#[derive(diesel::QueryableByName)]
struct Fields {
    #[diesel(sql_type = Text)]
    fields: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn honeypot() {
    let app = TestApp::start().await;
    let mut trap = endpoint("trap");
    trap.honeypot_field = Some("website".into());
    trap.redirect_url = Some("https://site.example/thanks".into());
    app.insert_endpoint_with(
        &trap,
        webhook(&trap, "https://receiver.example/hook", webhook_secret()),
    )
    .await;

    // Filled in: a success to the bot, nothing stored or delivered.
    let response = app
        .post_form("trap", FORM, "email=a%40b.c&website=http%3A%2F%2Fspam", &[])
        .await;
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert!(body["submission_id"].as_str().unwrap().starts_with("sub_"));
    assert_eq!(body["idempotent_replay"], false);
    assert_eq!(body["delivery"]["queued"], true);
    let response = app
        .post_form(
            "trap",
            FORM,
            "email=a&website=x",
            &[("accept", FIREFOX_ACCEPT)],
        )
        .await;
    assert_eq!(
        response.status(),
        303,
        "a browser bot is redirected like anyone"
    );
    assert_eq!(app.stored_counts().await, (0, 0));

    // Empty: dropped from what is stored.
    let response = app
        .post_form("trap", FORM, "email=a%40b.c&website=", &[])
        .await;
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["field_count"], 1);
    assert_eq!(app.stored_counts().await, (1, 1));
    let mut conn = app.db.connect().await;
    let stored: Fields = diesel::sql_query("SELECT fields::text AS fields FROM submissions")
        .get_result(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored.fields, r#"{"email":["a@b.c"]}"#);
}

fn content_types() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("application/x-www-form-urlencoded"),
        Just("multipart/form-data; boundary=XyZ"),
        Just("multipart/form-data"),
        Just("application/json"),
        Just("application/json; charset=latin1"),
    ]
}

/// Bytes that are sometimes almost valid, which reaches deeper than pure noise.
fn bodies() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        "[a-z%=&+]{0,200}".prop_map(String::into_bytes),
        r#"\{("[a-z\x00-\x1f]{0,5}": ?("[^"]{0,10}"|\[("[a-z]{0,3}",?){0,3}\]|[0-9]|null),?){0,5}\}?"#.prop_map(String::into_bytes),
        "(--XyZ\r\nContent-Disposition: form-data; name=\"[a-z]{0,4}\"(; filename=\"f\")?\r\n\r\n[a-z\r\n]{0,10}\r\n){0,3}(--XyZ--\r\n)?".prop_map(String::into_bytes),
    ]
}

#[test]
fn arbitrary_bodies_never_produce_a_server_error() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = runtime.block_on(async {
        let app = TestApp::start_with(
            &[
                ("FORMS_RATE_LIMIT_ENABLED", "false"),
                ("FORMS_MAX_BODY_BYTES", "400"),
            ],
            Arc::new(SystemClock),
        )
        .await;
        let mut contact = endpoint("contact");
        contact.honeypot_field = Some("h".into());
        app.insert_endpoint_with(
            &contact,
            webhook(&contact, "https://receiver.example/hook", webhook_secret()),
        )
        .await;
        app
    });
    let config = ProptestConfig {
        cases: 300,
        ..ProptestConfig::default()
    };
    proptest!(config, |(content_type in content_types(), body in bodies(), key in proptest::option::of("[ -~]{0,20}"))| {
        let status = runtime.block_on(async {
            let headers: Vec<(&str, &str)> = key.as_deref().map(|k| ("idempotency-key", k)).into_iter().collect();
            app.post_form("contact", Some(content_type), body.clone(), &headers).await.status().as_u16()
        });
        prop_assert!(status < 500, "{content_type} {body:?}: {status}");
    });
}
