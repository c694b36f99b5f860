//! The GraphQL management API through HTTP.

use std::sync::Arc;

use diesel::sql_types::Text;
use diesel::OptionalExtension;
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use serde_json::{json, Value};

use support::harness::{TestApp, TestDb};

async fn app_with_key(vars: &[(&str, &str)]) -> (TestApp, String) {
    let app = TestApp::start_with(vars, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("tests").await;
    (app, key)
}

fn code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or("<none>")
}

const CREATE: &str = "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { webhookSecret endpoint { id name isActive webhookUrl redirectUrl allowedOrigins honeypotField createdAt } } }";
const UPDATE: &str = "mutation($input: UpdateEndpointInput!) { updateEndpoint(input: $input) { webhookSecret endpoint { id name isActive webhookUrl redirectUrl allowedOrigins honeypotField } } }";

#[derive(diesel::QueryableByName)]
struct Secret {
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    secret: Option<String>,
}

async fn stored_secret(app: &TestApp, endpoint: &str) -> Option<String> {
    let mut conn = app.db.connect().await;
    let row: Option<Secret> = diesel::sql_query(format!(
        "SELECT secret FROM destinations
         WHERE endpoint_id = '{endpoint}' AND kind = 'webhook' AND removed_at IS NULL
         ORDER BY position LIMIT 1"
    ))
    .get_result(&mut conn)
    .await
    .optional()
    .unwrap();
    row.and_then(|row| row.secret)
}

#[tokio::test(flavor = "multi_thread")]
async fn graphql_over_http() {
    let (app, key) = app_with_key(&[("FORMS_MAX_BODY_BYTES", "4096")]).await;
    let bearer = format!("Bearer {key}");
    let get = |query: &str| {
        app.http
            .get(app.url("/graphql"))
            .query(&[("query", query)])
            .header("authorization", &bearer)
    };

    let response = get("{ version }").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["version"], env!("CARGO_PKG_VERSION"));

    // A mutation over GET is refused before it runs.
    let mutation =
        r#"mutation { createEndpoint(input: {id: "via-get", name: "x"}) { endpoint { id } } }"#;
    let response = get(mutation).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let body = app
        .gql(&key, "{ endpoint(id: \"via-get\") { id } }", json!({}))
        .await;
    assert_eq!(body["data"]["endpoint"], Value::Null, "nothing executed");

    // Only JSON bodies: text/plain, form and multipart POSTs are refused (CSRF).
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin1",
    ] {
        let response = app
            .http
            .post(app.url("/graphql"))
            .header("authorization", &bearer)
            .header("content-type", content_type)
            .body(r#"{"query":"{ version }"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 415, "{content_type}");
    }
    let post_raw = |body: &'static str| {
        app.http
            .post(app.url("/graphql"))
            .header("authorization", &bearer)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    assert_eq!(
        post_raw(r#"[{"query":"{ version }"}]"#)
            .await
            .unwrap()
            .status(),
        400,
        "no batching"
    );
    assert_eq!(post_raw(r#"{"query":"#).await.unwrap().status(), 400);
    assert_eq!(
        post_raw(r#"{"query":"{ version }","variables":"x"}"#)
            .await
            .unwrap()
            .status(),
        400
    );
    let big = format!(
        r#"{{"query":"{{ version }}","extensions":{{"pad":"{}"}}}}"#,
        "x".repeat(5000)
    );
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("authorization", &bearer)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);

    // A request error: 200 without data for application/json, 400 for the new media type.
    let response = post_raw(r#"{"query":"{ noSuchField }"}"#).await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(
        body.get("data").is_none() && body["errors"].is_array(),
        "{body}"
    );
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("authorization", &bearer)
        .header("accept", "application/graphql-response+json")
        .json(&json!({"query": "{ noSuchField }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/graphql-response+json"));
    let body: Value = response.json().await.unwrap();
    assert!(body.get("data").is_none());

    // GraphiQL for a browser.
    let response = app
        .http
        .get(app.url("/graphql"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response
        .text()
        .await
        .unwrap()
        .to_lowercase()
        .contains("graphiql"));
}

#[tokio::test(flavor = "multi_thread")]
async fn create_endpoint_rules() {
    let (app, key) = app_with_key(&[]).await;
    let input = json!({"id": "contact-form", "name": "Contact", "webhookUrl": "https://hooks.example.com/in", "redirectUrl": "https://site.example/thanks", "allowedOrigins": ["https://site.example", "HTTPS://Site.Example:443"], "honeypotField": "website"});
    let body = app.gql(&key, CREATE, json!({"input": input})).await;
    let payload = &body["data"]["createEndpoint"];
    let secret = payload["webhookSecret"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", body.to_string()));
    assert!(secret.starts_with("whsec_") && secret.len() == 70);
    assert_eq!(
        stored_secret(&app, "contact-form").await.as_deref(),
        Some(secret)
    );
    assert_eq!(payload["endpoint"]["isActive"], true);
    assert_eq!(
        payload["endpoint"]["allowedOrigins"],
        json!(["https://site.example"])
    );
    assert!(payload["endpoint"]["createdAt"]
        .as_str()
        .unwrap()
        .ends_with('Z'));

    let without_webhook = app
        .gql(
            &key,
            CREATE,
            json!({"input": {"id": "plain", "name": "Plain", "isActive": false}}),
        )
        .await;
    assert_eq!(
        without_webhook["data"]["createEndpoint"]["webhookSecret"],
        Value::Null
    );
    assert_eq!(
        without_webhook["data"]["createEndpoint"]["endpoint"]["isActive"],
        false
    );

    let refused = |input: Value, expected: &'static str| {
        let app = &app;
        let key = &key;
        async move {
            let body = app.gql(key, CREATE, json!({"input": input})).await;
            assert_eq!(code(&body), expected, "{input}: {body}");
            body
        }
    };
    refused(
        json!({"id": "contact-form", "name": "Again"}),
        "ENDPOINT_ALREADY_EXISTS",
    )
    .await;
    for id in ["ab", "-abc", "abc-", "Upper", "a b", &"a".repeat(65)] {
        refused(json!({"id": id, "name": "x"}), "INVALID_ENDPOINT_ID").await;
    }
    refused(json!({"id": "blank", "name": "   "}), "INVALID_INPUT").await;
    refused(
        json!({"id": "bad-redirect", "name": "x", "redirectUrl": "javascript:alert(1)"}),
        "INVALID_INPUT",
    )
    .await;
    refused(
        json!({"id": "bad-origin", "name": "x", "allowedOrigins": ["https://site.example/path"]}),
        "INVALID_INPUT",
    )
    .await;
    // Every refused address literal of docs/delivery.md, through the same function the worker
    // uses.
    for url in [
        "http://localhost/h",
        "http://api.localhost/h",
        "http://127.0.0.1/h",
        "http://127.1/h",
        "http://2130706433/h",
        "http://0x7f.1/h",
        "http://[::1]/h",
        "http://[::ffff:127.0.0.1]/h",
        "http://10.0.0.1/h",
        "http://172.16.0.1/h",
        "http://192.168.0.1/h",
        "http://169.254.169.254/h",
        "http://0.0.0.0/h",
        "http://100.64.0.1/h",
        "http://[fc00::1]/h",
        "http://[fe80::1]/h",
        "ftp://example.com/h",
        "https://",
        "not a url",
        // What the URL parser would repair into something the operator did not write.
        "https:///hook",
        "https:/hook",
        "https://example.com\\hook",
        // Outside global unicast, or embedding an internal address.
        "http://[64:ff9b:1::a00:1]/h",
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/h",
        "http://[::ffff:0:a00:1]/h",
    ] {
        let body = refused(
            json!({"id": "ssrf", "name": "x", "webhookUrl": url}),
            "INVALID_WEBHOOK_URL",
        )
        .await;
        assert_eq!(
            body["errors"][0]["extensions"]["details"]["field"],
            "webhookUrl"
        );
    }
    let endpoints = app
        .gql(
            &key,
            "{ endpoints(first: 10) { edges { node { id } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        endpoints["data"]["endpoints"]["edges"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "nothing refused was stored"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn update_endpoint_semantics() {
    let (app, key) = app_with_key(&[]).await;
    let created = app.gql(&key, CREATE, json!({"input": {"id": "contact", "name": "Contact", "webhookUrl": "https://a.example/hook", "redirectUrl": "https://site.example/ok", "honeypotField": "hp"}})).await;
    let first_secret = created["data"]["createEndpoint"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_string();

    // Left out: unchanged, no secret made.
    let body = app
        .gql(
            &key,
            UPDATE,
            json!({"input": {"id": "contact", "name": "Renamed"}}),
        )
        .await;
    let payload = &body["data"]["updateEndpoint"];
    assert_eq!(payload["webhookSecret"], Value::Null);
    assert_eq!(payload["endpoint"]["name"], "Renamed");
    assert_eq!(payload["endpoint"]["webhookUrl"], "https://a.example/hook");
    assert_eq!(
        payload["endpoint"]["redirectUrl"],
        "https://site.example/ok"
    );
    assert_eq!(
        stored_secret(&app, "contact").await.as_deref(),
        Some(first_secret.as_str())
    );

    // The same URL: nothing changes.
    let body = app
        .gql(
            &key,
            UPDATE,
            json!({"input": {"id": "contact", "webhookUrl": "https://a.example/hook"}}),
        )
        .await;
    assert_eq!(body["data"]["updateEndpoint"]["webhookSecret"], Value::Null);
    assert_eq!(
        stored_secret(&app, "contact").await.as_deref(),
        Some(first_secret.as_str())
    );

    // A different URL: validated, and a new secret returned once.
    let body = app
        .gql(
            &key,
            UPDATE,
            json!({"input": {"id": "contact", "webhookUrl": "https://b.example/hook"}}),
        )
        .await;
    let new_secret = body["data"]["updateEndpoint"]["webhookSecret"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", body.to_string()))
        .to_string();
    assert_ne!(new_secret, first_secret);
    assert_eq!(
        stored_secret(&app, "contact").await.as_deref(),
        Some(new_secret.as_str())
    );
    let body = app
        .gql(
            &key,
            UPDATE,
            json!({"input": {"id": "contact", "webhookUrl": "http://10.1.1.1/hook"}}),
        )
        .await;
    assert_eq!(code(&body), "INVALID_WEBHOOK_URL");
    assert_eq!(
        stored_secret(&app, "contact").await.as_deref(),
        Some(new_secret.as_str()),
        "a refused update changes nothing"
    );

    // null removes the webhook and its secret, and the other optional settings.
    let body = app.gql(&key, UPDATE, json!({"input": {"id": "contact", "webhookUrl": null, "redirectUrl": null, "honeypotField": null, "isActive": false}})).await;
    let payload = &body["data"]["updateEndpoint"];
    assert_eq!(payload["webhookSecret"], Value::Null);
    assert_eq!(payload["endpoint"]["webhookUrl"], Value::Null);
    assert_eq!(payload["endpoint"]["redirectUrl"], Value::Null);
    assert_eq!(payload["endpoint"]["honeypotField"], Value::Null);
    assert_eq!(payload["endpoint"]["isActive"], false);
    assert_eq!(stored_secret(&app, "contact").await, None);

    let body = app
        .gql(
            &key,
            UPDATE,
            json!({"input": {"id": "nowhere", "name": "x"}}),
        )
        .await;
    assert_eq!(code(&body), "ENDPOINT_NOT_FOUND");
    let body = app
        .gql(
            &key,
            "mutation { rotateWebhookSecret(endpointId: \"contact\") { webhookSecret } }",
            json!({}),
        )
        .await;
    assert_eq!(code(&body), "ENDPOINT_HAS_NO_WEBHOOK");
}

#[derive(diesel::QueryableByName)]
struct Snapshot {
    #[diesel(sql_type = Text)]
    destination_url: String,
    #[diesel(sql_type = Text)]
    signing_secret: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_deliveries_keep_their_snapshot() {
    let (app, key) = app_with_key(&[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    let created = app.gql(&key, CREATE, json!({"input": {"id": "contact", "name": "Contact", "webhookUrl": "https://a.example/hook"}})).await;
    let original = created["data"]["createEndpoint"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_string();
    app.submit("contact", "a=1").await;
    let rotated = app
        .gql(
            &key,
            "mutation { rotateWebhookSecret(endpointId: \"contact\") { webhookSecret } }",
            json!({}),
        )
        .await;
    let rotated = rotated["data"]["rotateWebhookSecret"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(rotated, original);
    app.gql(
        &key,
        UPDATE,
        json!({"input": {"id": "contact", "webhookUrl": "https://b.example/hook"}}),
    )
    .await;
    let mut conn = app.db.connect().await;
    let queued: Snapshot =
        diesel::sql_query("SELECT destination_url, signing_secret FROM webhook_deliveries")
            .get_result(&mut conn)
            .await
            .unwrap();
    assert_eq!(
        (
            queued.destination_url.as_str(),
            queued.signing_secret.as_str()
        ),
        ("https://a.example/hook", original.as_str())
    );
    // New submissions take the endpoint as it is now.
    app.submit("contact", "a=2").await;
    let newest: Snapshot = diesel::sql_query("SELECT destination_url, signing_secret FROM webhook_deliveries ORDER BY created_at DESC LIMIT 1").get_result(&mut conn).await.unwrap();
    assert_eq!(newest.destination_url, "https://b.example/hook");
    assert_ne!(newest.signing_secret, original);
}

async fn set_state(db: &TestDb, id: &str, sql_set: &str) {
    let mut conn = db.connect().await;
    diesel::sql_query(format!(
        "UPDATE webhook_deliveries SET {sql_set} WHERE id = '{id}'"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
}

const REPLAY: &str = "mutation($id: ID!) { replayDelivery(id: $id) { delivery { id state attempts cycleAttempts completedAt claimExpiresAt } } }";

#[tokio::test(flavor = "multi_thread")]
async fn replay_rules_and_races() {
    let (app, key) = app_with_key(&[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    app.webhook_endpoint("contact", "https://a.example/hook")
        .await;
    for _ in 0..4 {
        app.submit("contact", "a=1").await;
    }
    let ids = app.db.delivery_ids().await;
    set_state(&app.db, &ids[1], "state = 'processing', claim_token = 'clm_00000000000000000000000000000001', claim_expires_at = now() + interval '1 minute'").await;
    set_state(
        &app.db,
        &ids[2],
        "state = 'delivered', attempts = 1, cycle_attempts = 1, completed_at = now()",
    )
    .await;
    set_state(
        &app.db,
        &ids[3],
        "state = 'failed', attempts = 5, cycle_attempts = 5, completed_at = now()",
    )
    .await;
    for (id, state) in [
        (&ids[0], "pending"),
        (&ids[1], "processing"),
        (&ids[2], "delivered"),
    ] {
        let body = app.gql(&key, REPLAY, json!({"id": id})).await;
        assert_eq!(code(&body), "DELIVERY_NOT_REPLAYABLE", "{state}");
        assert_eq!(
            body["errors"][0]["extensions"]["details"],
            json!({"delivery_id": id, "state": state})
        );
    }
    let body = app
        .gql(
            &key,
            REPLAY,
            json!({"id": "whd_00000000000000000000000000000000"}),
        )
        .await;
    assert_eq!(code(&body), "DELIVERY_NOT_FOUND");

    // Two concurrent replays of one failed delivery: exactly one wins.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let app = Arc::new(app);
    let mut racers = Vec::new();
    for _ in 0..2 {
        let (app, key, barrier, id) = (app.clone(), key.clone(), barrier.clone(), ids[3].clone());
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            app.gql(&key, REPLAY, json!({"id": id})).await
        }));
    }
    let mut results = Vec::new();
    for racer in racers {
        results.push(racer.await.unwrap());
    }
    let winners: Vec<&Value> = results
        .iter()
        .filter(|b| b.get("errors").is_none())
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let delivery = &winners[0]["data"]["replayDelivery"]["delivery"];
    assert_eq!(delivery["state"], "PENDING");
    assert_eq!(
        (
            delivery["attempts"].as_i64(),
            delivery["cycleAttempts"].as_i64()
        ),
        (Some(5), Some(0))
    );
    assert_eq!(delivery["completedAt"], Value::Null);
    let loser = results.iter().find(|b| b.get("errors").is_some()).unwrap();
    assert_eq!(code(loser), "DELIVERY_NOT_REPLAYABLE");
    assert_eq!(
        loser["errors"][0]["extensions"]["details"]["state"],
        "pending"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_replay_counts_what_matches() {
    let (app, key) = app_with_key(&[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    app.webhook_endpoint("one", "https://a.example/hook").await;
    app.webhook_endpoint("two", "https://a.example/hook").await;
    for endpoint in ["one", "one", "one", "two", "two"] {
        app.submit(endpoint, "a=1").await;
    }
    let ids = app.db.delivery_ids().await;
    for (id, failed_at) in ids.iter().zip([
        "2026-01-01",
        "2026-02-01",
        "2026-03-01",
        "2026-02-01",
        "2026-02-01",
    ]) {
        set_state(&app.db, id, &format!("state = 'failed', attempts = 5, cycle_attempts = 5, completed_at = '{failed_at}T00:00:00Z'")).await;
    }
    set_state(
        &app.db,
        &ids[4],
        "state = 'delivered', completed_at = now()",
    )
    .await;
    let bulk = "mutation($filter: ReplayFilter!) { replayDeliveries(filter: $filter) { count } }";
    let body = app.gql(&key, bulk, json!({"filter": {"failedAfter": "2026-03-01T00:00:00Z", "failedBefore": "2026-02-01T00:00:00Z"}})).await;
    assert_eq!(code(&body), "INVALID_TIME_RANGE");
    let body = app
        .gql(
            &key,
            bulk,
            json!({"filter": {"endpointId": "one", "failedAfter": "2026-01-15T00:00:00Z"}}),
        )
        .await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 2, "{body}");
    let body = app.gql(&key, bulk, json!({"filter": {}})).await;
    assert_eq!(
        body["data"]["replayDeliveries"]["count"], 2,
        "the rest: one of one and one of two"
    );
    let body = app.gql(&key, bulk, json!({"filter": {}})).await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 0);
    let states: Vec<String> = app
        .db
        .deliveries()
        .await
        .into_iter()
        .map(|d| d.state)
        .collect();
    assert_eq!(
        states,
        ["pending", "pending", "pending", "pending", "delivered"]
    );
}

const ERASE: &str = "mutation($id: ID!) { deleteSubmission(id: $id) { deletedSubmissionId } }";

#[tokio::test(flavor = "multi_thread")]
async fn erasing_a_submission_waits_for_its_delivery() {
    let (app, key) = app_with_key(&[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    app.webhook_endpoint("contact", "https://a.example/hook")
        .await;
    let submission = app.submit("contact", "secret=value").await;
    let delivery = app.db.deliveries().await.remove(0).id;
    let body = app.gql(&key, ERASE, json!({"id": submission})).await;
    assert_eq!(code(&body), "SUBMISSION_DELIVERY_IN_PROGRESS");
    assert_eq!(
        body["errors"][0]["extensions"]["details"]["state"],
        "pending"
    );
    set_state(&app.db, &delivery, "state = 'processing', claim_token = 'clm_00000000000000000000000000000001', claim_expires_at = now()").await;
    let body = app.gql(&key, ERASE, json!({"id": submission})).await;
    assert_eq!(code(&body), "SUBMISSION_DELIVERY_IN_PROGRESS");
    set_state(&app.db, &delivery, "state = 'failed', claim_token = NULL, claim_expires_at = NULL, attempts = 5, cycle_attempts = 5, completed_at = now()").await;
    let body = app.gql(&key, ERASE, json!({"id": submission})).await;
    assert_eq!(
        body["data"]["deleteSubmission"]["deletedSubmissionId"],
        submission.as_str()
    );
    // The delivery and its history stay; a replay is refused now.
    let body = app
        .gql(
            &key,
            "query($id: ID!) { delivery(id: $id) { state submission { id } } }",
            json!({"id": delivery}),
        )
        .await;
    assert_eq!(
        body["data"]["delivery"],
        json!({"state": "FAILED", "submission": null})
    );
    let body = app.gql(&key, REPLAY, json!({"id": delivery})).await;
    assert_eq!(code(&body), "DELIVERY_NOT_REPLAYABLE");
    assert_eq!(
        body["errors"][0]["extensions"]["details"]["reason"],
        "submission_erased"
    );
    let body = app.gql(&key, ERASE, json!({"id": submission})).await;
    assert_eq!(code(&body), "SUBMISSION_NOT_FOUND");
    // Without a webhook there is nothing to wait for.
    app.insert_endpoint(&support::harness::endpoint("plain"))
        .await;
    let plain = app.submit("plain", "a=1").await;
    let body = app.gql(&key, ERASE, json!({"id": plain})).await;
    assert!(body.get("errors").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn submissions_show_fields_in_stored_order() {
    let (app, key) = app_with_key(&[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;
    let id = app.submit("contact", "z=1&a=x&z=2").await;
    let body = app.gql(&key, "query($id: ID!) { submission(id: $id) { id fieldCount idempotent receivedAt fields { name values } endpoint { id } delivery { id } } }", json!({"id": id})).await;
    let submission = &body["data"]["submission"];
    assert_eq!(
        submission["fields"],
        json!([{"name": "z", "values": ["1", "2"]}, {"name": "a", "values": ["x"]}])
    );
    assert_eq!(submission["fieldCount"], 3);
    assert_eq!(submission["idempotent"], false);
    assert_eq!(submission["endpoint"]["id"], "contact");
    assert_eq!(submission["delivery"], Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_replay_dry_run_and_creation_bounds() {
    let (app, key) = app_with_key(&[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    app.webhook_endpoint("one", "https://a.example/hook").await;
    for _ in 0..3 {
        app.submit("one", "a=1").await;
    }
    let ids = app.db.delivery_ids().await;
    for (id, created) in ids.iter().zip(["2026-01-01", "2026-02-01", "2026-03-01"]) {
        set_state(
            &app.db,
            id,
            &format!("state = 'failed', completed_at = now(), created_at = '{created}T00:00:00Z'"),
        )
        .await;
    }
    let bulk = "mutation($filter: ReplayFilter!, $dryRun: Boolean) { replayDeliveries(filter: $filter, dryRun: $dryRun) { count } }";
    let since_february = json!({"endpointId": "one", "createdAfter": "2026-01-15T00:00:00Z"});
    let body = app
        .gql(
            &key,
            bulk,
            json!({"filter": since_february, "dryRun": true}),
        )
        .await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 2, "{body}");
    let states = |rows: Vec<support::harness::DeliveryRow>| -> Vec<String> {
        rows.into_iter().map(|d| d.state).collect()
    };
    assert_eq!(
        states(app.db.deliveries().await),
        ["failed", "failed", "failed"],
        "a dry run changes nothing"
    );
    let body = app
        .gql(&key, bulk, json!({"filter": {"createdAfter": "2026-03-01T00:00:00Z", "createdBefore": "2026-02-01T00:00:00Z"}, "dryRun": true}))
        .await;
    assert_eq!(code(&body), "INVALID_TIME_RANGE");
    let body = app
        .gql(
            &key,
            bulk,
            json!({"filter": {"endpointId": "one", "createdBefore": "2026-02-15T00:00:00Z"}}),
        )
        .await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 2, "{body}");
    assert_eq!(
        states(app.db.deliveries().await),
        ["pending", "pending", "failed"]
    );
    let body = app
        .gql(
            &key,
            bulk,
            json!({"filter": since_february, "dryRun": true}),
        )
        .await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 1, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn delivery_activity_counts_deliveries_ending_per_minute() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-06-01T12:30:30Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let clock = Arc::new(hymical_forms::testing::clock::ManualClock::new(now));
    let app = TestApp::start_with(&[], clock).await;
    let (_, key) = app.create_key("tests").await;
    let mut conn = app.db.connect().await;
    // (endpoint, kind, state, previous state, when)
    let events = [
        (
            "one",
            "attempt_recorded",
            "delivered",
            "processing",
            "12:30:05",
        ),
        (
            "one",
            "attempt_recorded",
            "delivered",
            "processing",
            "12:30:10",
        ),
        (
            "two",
            "attempt_recorded",
            "failed",
            "processing",
            "12:30:20",
        ),
        (
            "one",
            "failed_without_attempt",
            "failed",
            "pending",
            "12:25:00",
        ),
        // Not an ending: a retry, a late attempt on a delivered delivery, a claim.
        (
            "one",
            "attempt_recorded",
            "pending",
            "processing",
            "12:30:01",
        ),
        (
            "one",
            "late_attempt_recorded",
            "delivered",
            "delivered",
            "12:30:02",
        ),
        ("one", "claimed", "processing", "pending", "12:30:03"),
        // Outside the hour.
        (
            "one",
            "attempt_recorded",
            "delivered",
            "processing",
            "11:30:59",
        ),
    ];
    for (endpoint, kind, state, previous, at) in events {
        diesel::sql_query(format!(
            "INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state, attempts, cycle_attempts, occurred_at) \
             VALUES ('whd_x', '{endpoint}', '{kind}', '{state}', '{previous}', 1, 1, '2026-06-01T{at}Z')"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let query = "query($endpointId: ID, $minutes: Int) { deliveryActivity(endpointId: $endpointId, minutes: $minutes) { minute delivered failed } }";
    let body = app.gql(&key, query, json!({})).await;
    let minutes = body["data"]["deliveryActivity"].as_array().expect("a list");
    assert_eq!(minutes.len(), 60);
    assert_eq!(minutes[0]["minute"], "2026-06-01T11:31:00.000000Z");
    assert_eq!(
        minutes[59],
        json!({"minute": "2026-06-01T12:30:00.000000Z", "delivered": 2, "failed": 1})
    );
    assert_eq!(
        minutes[54],
        json!({"minute": "2026-06-01T12:25:00.000000Z", "delivered": 0, "failed": 1})
    );
    assert_eq!(minutes[0]["delivered"], 0, "11:30:59 is outside the hour");
    let total: i64 = minutes
        .iter()
        .map(|m| m["delivered"].as_i64().unwrap() + m["failed"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 4);

    let body = app
        .gql(&key, query, json!({"endpointId": "two", "minutes": 1}))
        .await;
    assert_eq!(
        body["data"]["deliveryActivity"],
        json!([{"minute": "2026-06-01T12:30:00.000000Z", "delivered": 0, "failed": 1}])
    );
    for minutes in [0, 61] {
        let body = app.gql(&key, query, json!({"minutes": minutes})).await;
        assert_eq!(code(&body), "INVALID_INPUT", "{body}");
    }
    // Per endpoint counts on the endpoint itself.
    app.webhook_endpoint("three", "https://a.example/hook")
        .await;
    app.submit("three", "a=1").await;
    let body = app
        .gql(&key, "{ endpoint(id: \"three\") { deliveryCounts { pending processing delivered failed } } }", json!({}))
        .await;
    assert_eq!(
        body["data"]["endpoint"]["deliveryCounts"],
        json!({"pending": 1, "processing": 0, "delivered": 0, "failed": 0})
    );
}

/// A replay goes where its delivery was first sent, signed with the secret it was accepted
/// under; with `destination: CURRENT` (one or in bulk) it goes to the endpoint's webhook as
/// it is now, after a rotation and a move, and only the new secret verifies it.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_goes_to_the_snapshot_or_to_where_the_endpoint_is_now() {
    use hymical_forms::testing::delivery::payload::signature;
    use support::receiver::Receiver;
    let old_receiver = Receiver::start().await;
    let new_receiver = Receiver::start().await;
    let (app, key) = app_with_key(&[
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
        ("FORMS_WEBHOOK_MAX_ATTEMPTS", "1"),
    ])
    .await;
    let created = app
        .gql(
            &key,
            CREATE,
            json!({"input": {"id": "contact", "name": "Contact", "webhookUrl": old_receiver.url("/status/503")}}),
        )
        .await;
    let leaked = created["data"]["createEndpoint"]["webhookSecret"]
        .as_str()
        .expect("secret")
        .to_string();
    for n in 0..3 {
        app.submit("contact", &format!("n={n}")).await;
    }
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 3);
    old_receiver.wait_for(3).await;
    let failed = app.db.delivery_ids().await;
    for id in &failed {
        assert_eq!(app.db.delivery(id).await.state, "failed");
    }

    // The secret leaked and the receiver moved: rotate without overlap, change the URL.
    let rotated = app
        .gql(
            &key,
            "mutation { rotateWebhookSecret(endpointId: \"contact\", overlapSeconds: 0) { webhookSecret } }",
            json!({}),
        )
        .await;
    let rotated = rotated["data"]["rotateWebhookSecret"]["webhookSecret"]
        .as_str()
        .unwrap_or_else(|| panic!("{rotated}"))
        .to_string();
    let moved = app
        .gql(
            &key,
            UPDATE,
            json!({"input": {"id": "contact", "webhookUrl": new_receiver.url("/hook")}}),
        )
        .await;
    // A new URL gets a secret of its own; without one the rotated secret stays current.
    let fresh = moved["data"]["updateEndpoint"]["webhookSecret"]
        .as_str()
        .map_or(rotated, str::to_string);
    assert_ne!(fresh, leaked);
    let replay = "mutation($id: ID!, $to: ReplayDestination) { replayDelivery(id: $id, destination: $to) { delivery { state destinationUrl } } }";

    // The default: the snapshot, old place and old secret.
    let body = app.gql(&key, replay, json!({"id": failed[0]})).await;
    assert_eq!(
        body["data"]["replayDelivery"]["delivery"]["destinationUrl"],
        old_receiver.url("/status/503"),
        "{body}"
    );
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let at_old = old_receiver.wait_for(4).await;
    let snapshot = &at_old[3];
    assert_eq!(
        snapshot.headers["hymical-signature"].to_str().unwrap(),
        signature(&leaked, &snapshot.body)
    );

    // One to where the endpoint is now: new place, signed with the new secret only.
    let body = app
        .gql(&key, replay, json!({"id": failed[1], "to": "CURRENT"}))
        .await;
    assert_eq!(
        body["data"]["replayDelivery"]["delivery"],
        json!({"state": "PENDING", "destinationUrl": new_receiver.url("/hook")}),
        "{body}"
    );
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let at_new = new_receiver.wait_for(1).await;
    let current = &at_new[0];
    let hymical = current.headers["hymical-signature"].to_str().unwrap();
    assert_eq!(hymical, signature(&fresh, &current.body));
    assert_ne!(hymical, signature(&leaked, &current.body));
    assert_eq!(app.db.delivery(&failed[1]).await.state, "delivered");
    assert_eq!(
        old_receiver.received().len(),
        4,
        "nothing more to the old place"
    );

    // In bulk: the two still failed (the snapshot replay failed again at the old place).
    let bulk = "mutation($dry: Boolean, $to: ReplayDestination) { replayDeliveries(filter: { endpointId: \"contact\" }, dryRun: $dry, destination: $to) { count } }";
    let body = app
        .gql(&key, bulk, json!({"dry": true, "to": "CURRENT"}))
        .await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 2, "{body}");
    let body = app.gql(&key, bulk, json!({"to": "CURRENT"})).await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 2, "{body}");
    assert_eq!(worker.run_once().await.unwrap(), 2);
    let at_new = new_receiver.wait_for(3).await;
    for received in &at_new[1..] {
        assert_eq!(
            received.headers["hymical-signature"].to_str().unwrap(),
            signature(&fresh, &received.body)
        );
    }
    assert_eq!(old_receiver.received().len(), 4);

    // Without a webhook there is nowhere current to go; the snapshot still is.
    app.gql(
        &key,
        UPDATE,
        json!({"input": {"id": "contact", "webhookUrl": null}}),
    )
    .await;
    let mut conn = app.db.connect().await;
    diesel::sql_query(format!(
        "UPDATE webhook_deliveries SET state = 'failed', completed_at = now() WHERE id = '{}'",
        failed[0]
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let body = app
        .gql(&key, replay, json!({"id": failed[0], "to": "CURRENT"}))
        .await;
    assert_eq!(code(&body), "ENDPOINT_HAS_NO_WEBHOOK", "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["details"]["endpoint_id"],
        "contact"
    );
    let body = app
        .gql(&key, bulk, json!({"dry": true, "to": "CURRENT"}))
        .await;
    assert_eq!(body["data"]["replayDeliveries"]["count"], 0, "{body}");
    let body = app.gql(&key, replay, json!({"id": failed[0]})).await;
    assert_eq!(
        body["data"]["replayDelivery"]["delivery"]["state"], "PENDING",
        "{body}"
    );
}
