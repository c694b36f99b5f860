//! Health, readiness, the error envelope of unknown routes and methods, and management-key
//! authentication of `/graphql`.

use std::sync::Arc;

use hymical_forms::testing::clock::SystemClock;
use serde_json::json;

use support::harness::TestApp;

#[tokio::test(flavor = "multi_thread")]
async fn health_and_ready() {
    let app = TestApp::start().await;
    let response = app.http.get(app.url("/health")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"status": "ok", "service": "hymical-forms", "version": env!("CARGO_PKG_VERSION")})
    );
    let response = app.http.get(app.url("/ready")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn ready_is_503_and_health_200_when_the_database_is_gone() {
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    app.db.drop_now().await;
    let response = app.http.get(app.url("/ready")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "storage_unavailable");
    let text = body.to_string();
    assert!(
        !text.contains("hymical_test_"),
        "no driver message leaks: {text}"
    );
    let response = app.http.get(app.url("/health")).send().await.unwrap();
    assert_eq!(response.status(), 200, "health never touches the database");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_paths_and_wrong_methods_get_the_json_envelope() {
    let app = TestApp::start().await;
    let response = app.http.get(app.url("/no/such/path")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");
    assert!(body["error"]["message"].is_string());

    let response = app.http.delete(app.url("/health")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET,HEAD");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");

    let response = app.http.put(app.url("/graphql")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET,HEAD,POST");
}

#[tokio::test(flavor = "multi_thread")]
async fn graphql_needs_a_usable_management_key() {
    let app = TestApp::start().await;
    let (key_id, key) = app.create_key("dashboard").await;
    let (status, body) = app
        .graphql(Some(&format!("Bearer {key}")), "{ __typename }")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["__typename"], "Query");

    let (_, revoked_key) = app.create_key("revoked").await;
    {
        let mut conn = app.db.connect().await;
        let revoked_id = hymical_forms::testing::db::keys::list(&mut conn)
            .await
            .unwrap()
            .into_iter()
            .find(|k| k.name == "revoked")
            .unwrap()
            .id;
        hymical_forms::testing::db::keys::revoke(&mut conn, &revoked_id, chrono::Utc::now())
            .await
            .unwrap();
    }
    let unknown = hymical_forms::testing::auth::generate(
        "never stored",
        hymical_forms::testing::model::state::KeyRole::Admin,
        chrono::Utc::now(),
    )
    .key;
    let cases: Vec<(Option<String>, &str)> = vec![
        (None, "AUTHENTICATION_REQUIRED"),
        (Some(format!("Basic {key}")), "AUTHENTICATION_REQUIRED"),
        (Some("Bearer".into()), "AUTHENTICATION_REQUIRED"),
        (Some("Bearer    ".into()), "AUTHENTICATION_REQUIRED"),
        (Some("Bearer hym_live_short".into()), "INVALID_API_KEY"),
        (
            Some(format!("Bearer {}", unknown.expose())),
            "INVALID_API_KEY",
        ),
        (Some(format!("Bearer {revoked_key}")), "INVALID_API_KEY"),
    ];
    for (header, code) in cases {
        for query in ["{ __typename }", "{ __schema { types { name } } }"] {
            let response = app
                .http
                .post(app.url("/graphql"))
                .json(&json!({ "query": query }));
            let response = match &header {
                Some(value) => response.header("authorization", value),
                None => response,
            };
            let response = response.send().await.unwrap();
            assert_eq!(response.status(), 401, "{header:?}");
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(
                body["errors"][0]["extensions"]["code"], code,
                "{header:?}: {body}"
            );
            assert!(body.get("data").is_none(), "nothing executes: {body}");
        }
    }

    // The key's use is recorded.
    let mut conn = app.db.connect().await;
    let keys = hymical_forms::testing::db::keys::list(&mut conn)
        .await
        .unwrap();
    let used = keys.iter().find(|k| k.id == key_id).unwrap();
    assert!(used.last_used_at.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_the_query_string_are_ignored() {
    let app = TestApp::start().await;
    let (_, key) = app.create_key("dashboard").await;
    let response = app
        .http
        .get(app.url(&format!(
            "/graphql?query=%7B__typename%7D&access_token={key}&authorization=Bearer%20{key}"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}
