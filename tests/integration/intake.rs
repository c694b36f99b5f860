//! Public intake through HTTP against real PostgreSQL.

use std::sync::Arc;

use diesel::sql_types::{Bool, Text, Timestamptz};
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use serde_json::{json, Value};

use support::harness::{endpoint, webhook, webhook_secret, TestApp};

const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
const JSON: Option<&str> = Some("application/json");

async fn app_with_endpoint(vars: &[(&str, &str)]) -> (TestApp, String) {
    let app = TestApp::start_with(vars, Arc::new(SystemClock)).await;
    let contact = endpoint("contact");
    let secret = webhook_secret();
    app.insert_endpoint_with(
        &contact,
        webhook(&contact, "https://receiver.example/hook", secret.clone()),
    )
    .await;
    (app, secret)
}

/// Posts `body` to the endpoint "contact" without further headers; asserts the answer's
/// `status` and answers its JSON.
async fn post_contact(
    app: &TestApp,
    content_type: Option<&str>,
    body: impl Into<reqwest::Body>,
    status: u16,
) -> Value {
    let response = app.post_form("contact", content_type, body, &[]).await;
    assert_eq!(response.status(), status);
    response.json().await.unwrap()
}

#[derive(diesel::QueryableByName, Debug)]
struct StoredSubmission {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    fields: String,
    #[diesel(sql_type = Timestamptz)]
    received_at: chrono::DateTime<chrono::Utc>,
}

/// Every stored submission, oldest first.
async fn stored_submissions(app: &TestApp) -> Vec<StoredSubmission> {
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "SELECT id, fields::text AS fields, received_at FROM submissions ORDER BY received_at",
    )
    .load(&mut conn)
    .await
    .unwrap()
}

/// The one stored submission.
async fn only_submission(app: &TestApp) -> StoredSubmission {
    let mut rows = stored_submissions(app).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.remove(0)
}

#[derive(diesel::QueryableByName, Debug)]
struct StoredDelivery {
    #[diesel(sql_type = Text)]
    submission_id: String,
    #[diesel(sql_type = Text)]
    destination_url: String,
    #[diesel(sql_type = Text)]
    signing_secret: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    attempts: i32,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    cycle_attempts: i32,
    #[diesel(sql_type = Bool)]
    due_at_receipt: bool,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_post_is_stored_with_its_delivery_in_order() {
    let (app, secret) = app_with_endpoint(&[]).await;
    let response = app
        .post_form(
            "contact",
            FORM,
            "topics=billing&email=a%40example.com&topics=api&note=h%C3%A9+%E2%9C%93&topics=",
            &[("authorization", "Bearer ignored-on-public-routes")],
        )
        .await;
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["endpoint_id"], "contact");
    assert_eq!(body["field_count"], 5, "values are counted one by one");
    assert_eq!(body["idempotent_replay"], false);
    assert_eq!(body["delivery"], json!({"queued": true}));
    let id = body["submission_id"].as_str().unwrap();
    assert!(id.starts_with("sub_") && id.len() == 36);
    assert!(
        !body.to_string().contains("example.com"),
        "values never echoed"
    );

    let stored = only_submission(&app).await;
    assert_eq!(stored.id, id);
    assert_eq!(
        stored.fields,
        r#"{"topics":["billing","api",""],"email":["a@example.com"],"note":["hé ✓"]}"#
    );
    assert_eq!(
        body["received_at"],
        hymical_forms::testing::clock::format_timestamp(stored.received_at),
        "the answer's time is the stored time, to the microsecond"
    );
    let received = body["received_at"].as_str().unwrap();
    assert_eq!(received.len(), 27);
    assert!(received.ends_with('Z'));

    // Due at once by the database's clock: the moment of the statement that wrote it, which
    // its `created` event carries too.
    let mut conn = app.db.connect().await;
    let delivery: StoredDelivery = diesel::sql_query(
        "SELECT submission_id, destination_url, signing_secret, state, attempts, cycle_attempts,
                (created_at = s.received_at
                 AND next_attempt_at = (SELECT e.occurred_at FROM delivery_events e
                                        WHERE e.delivery_id = d.id AND e.kind = 'created'))
                    AS due_at_receipt
         FROM webhook_deliveries d JOIN submissions s ON s.id = d.submission_id",
    )
    .get_result(&mut conn)
    .await
    .unwrap();
    assert_eq!(delivery.submission_id, id);
    assert_eq!(delivery.destination_url, "https://receiver.example/hook");
    assert_eq!(delivery.signing_secret, secret);
    assert_eq!(delivery.state, "pending");
    assert_eq!((delivery.attempts, delivery.cycle_attempts), (0, 0));
    assert!(delivery.due_at_receipt);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_and_multipart_bodies() {
    let (app, _) = app_with_endpoint(&[]).await;
    let body = post_contact(
        &app,
        JSON,
        r#"{"name": "Zoë", "topics": ["a", "b"], "skip": []}"#,
        202,
    )
    .await;
    assert_eq!(body["field_count"], 3);

    let multipart = "--B\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--B\r\nContent-Disposition: form-data; name=\"y\"\r\n\r\nline one\r\nline two\r\n--B\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n2\r\n--B--\r\n";
    post_contact(
        &app,
        Some("multipart/form-data; boundary=B"),
        multipart,
        202,
    )
    .await;
    let rows = stored_submissions(&app).await;
    assert_eq!(rows[0].fields, r#"{"name":["Zoë"],"topics":["a","b"]}"#);
    assert_eq!(
        rows[1].fields,
        r#"{"x":["1","2"],"y":["line one\r\nline two"]}"#
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_delivery_without_a_webhook() {
    let app = TestApp::start().await;
    app.insert_endpoint(&endpoint("plain")).await;
    let response = app.post_form("plain", FORM, "a=1", &[]).await;
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["delivery"]["queued"], false);
    assert_eq!(app.stored_counts().await, (1, 0));
}

/// One refused request: expected status, code and details; nothing stored.
struct Refusal<'a> {
    endpoint: &'a str,
    content_type: Option<&'a str>,
    body: Vec<u8>,
    headers: Vec<(&'a str, String)>,
    status: u16,
    code: &'a str,
    details: Option<Value>,
}

fn refusal<'a>(
    endpoint: &'a str,
    content_type: Option<&'a str>,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'a str,
) -> Refusal<'a> {
    Refusal {
        endpoint,
        content_type,
        body: body.into(),
        headers: Vec::new(),
        status,
        code,
        details: None,
    }
}

impl<'a> Refusal<'a> {
    fn header(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
    fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_error_code_with_status_details_and_nothing_stored() {
    let (app, _) = app_with_endpoint(&[
        ("FORMS_MAX_BODY_BYTES", "2000"),
        ("FORMS_MAX_FIELDS", "3"),
        ("FORMS_MAX_FIELD_NAME_LENGTH", "8"),
        ("FORMS_MAX_FIELD_VALUE_LENGTH", "10"),
    ])
    .await;
    let mut inactive = endpoint("dormant");
    inactive.is_active = false;
    app.insert_endpoint(&inactive).await;
    let mut guarded = endpoint("guarded");
    guarded.allowed_origins = vec![Some("https://site.example".into())];
    app.insert_endpoint(&guarded).await;

    let big = "a=".to_string() + &"x".repeat(2100);
    let file = "--B\r\nContent-Disposition: form-data; name=\"cv\"; filename=\"cv.pdf\"\r\n\r\n%PDF\r\n--B--\r\n";
    let cases = vec![
        refusal("contact", FORM, big.clone(), 413, "request_body_too_large").details(json!({"limit_bytes": 2000})),
        // Check order: the size check comes before everything else.
        refusal("no-such-endpoint", FORM, big.clone(), 413, "request_body_too_large"),
        refusal("NO", FORM, big, 413, "request_body_too_large"),
        refusal("AB", FORM, "a=1", 404, "invalid_endpoint_id"),
        refusal("-bad-", FORM, "a=1", 404, "invalid_endpoint_id"),
        refusal("missing", FORM, "a=1", 404, "endpoint_not_found").details(json!({"endpoint_id": "missing"})),
        refusal("missing", Some("text/plain"), "a=1", 404, "endpoint_not_found"),
        refusal("dormant", FORM, "a=1", 409, "endpoint_inactive").details(json!({"endpoint_id": "dormant"})),
        refusal("dormant", Some("text/plain"), "garbage", 409, "endpoint_inactive"),
        refusal("guarded", FORM, "a=1", 403, "origin_not_allowed").header("origin", "https://evil.example"),
        refusal("guarded", Some("text/plain"), "a=1", 403, "origin_not_allowed").header("origin", "https://evil.example"),
        refusal("contact", Some("text/plain"), "a=1", 415, "unsupported_media_type")
            .details(json!({"received": "text/plain", "supported": ["application/x-www-form-urlencoded", "multipart/form-data", "application/json"]})),
        refusal("contact", None, "a=1", 415, "unsupported_media_type")
            .details(json!({"received": null, "supported": ["application/x-www-form-urlencoded", "multipart/form-data", "application/json"]})),
        refusal("contact", Some("Text/HTML ; charset=x"), "a=1", 415, "unsupported_media_type")
            .details(json!({"received": "text/html", "supported": ["application/x-www-form-urlencoded", "multipart/form-data", "application/json"]})),
        refusal("contact", FORM, "a=1", 400, "invalid_idempotency_key").header("idempotency-key", ""),
        refusal("contact", FORM, "a=1", 400, "invalid_idempotency_key").header("idempotency-key", "too-short"),
        refusal("contact", FORM, "a=1", 400, "invalid_idempotency_key").header("idempotency-key", "has a space in the key"),
        refusal("contact", FORM, "a=1", 400, "invalid_idempotency_key").header("idempotency-key", "k".repeat(256)),
        refusal("contact", FORM, "{{{", 400, "invalid_idempotency_key").header("idempotency-key", "short"),
        refusal("contact", JSON, "{not json", 400, "malformed_form_body"),
        refusal("contact", JSON, "[\"a\"]", 400, "malformed_form_body"),
        refusal("contact", JSON, r#"{"a": 1}"#, 400, "malformed_form_body"),
        refusal("contact", JSON, r#"{"a": ["x", null]}"#, 400, "malformed_form_body"),
        refusal("contact", FORM, b"a=%FF%FE".to_vec(), 400, "malformed_form_body"),
        refusal("contact", Some("multipart/form-data"), "x", 400, "malformed_form_body"),
        refusal("contact", Some("multipart/form-data; boundary=B"), file, 422, "file_upload_not_supported").details(json!({"field": "cv"})),
        refusal("contact", FORM, "a=1&a=2&b=3&c=4", 422, "too_many_fields").details(json!({"limit": 3, "received": 4})),
        refusal("contact", FORM, "=value", 422, "invalid_field_name"),
        refusal("contact", FORM, "a%01b=1", 422, "invalid_field_name"),
        refusal("contact", FORM, "a%C2%85=1", 422, "invalid_field_name"),
        refusal("contact", FORM, "abcdefghi=1", 422, "field_name_too_long").details(json!({"limit": 8, "received": 9})),
        // Pair by pair, name before value: the long name in the second pair loses to
        // nothing in the first, and the long value of the first pair wins.
        refusal("contact", FORM, "v=12345678901&abcdefghi=1", 422, "field_value_too_long")
            .details(json!({"field": "v", "limit": 10, "received": 11})),
        refusal("contact", FORM, "v=%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9", 422, "field_value_too_long")
            .details(json!({"field": "v", "limit": 10, "received": 11})),
        refusal("contact", FORM, "v=a%00b", 422, "invalid_field_value").details(json!({"field": "v"})),
        refusal("contact", JSON, r#"{"v": "a\u0000b"}"#, 422, "invalid_field_value"),
        refusal("contact", FORM, "", 422, "empty_submission"),
        refusal("contact", JSON, "{}", 422, "empty_submission"),
    ];
    for case in cases {
        let headers: Vec<(&str, &str)> =
            case.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let response = app
            .post_form(
                case.endpoint,
                case.content_type,
                case.body.clone(),
                &headers,
            )
            .await;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(
            status,
            case.status,
            "{} {:?}: {body}",
            case.code,
            String::from_utf8_lossy(&case.body)
        );
        assert_eq!(body["error"]["code"], case.code, "{body}");
        assert!(body["error"]["message"].is_string());
        if let Some(details) = &case.details {
            assert_eq!(&body["error"]["details"], details, "{}", case.code);
        }
        assert_eq!(
            app.stored_counts().await,
            (0, 0),
            "{}: nothing stored",
            case.code
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_without_declared_length_is_cut_off_at_the_limit() {
    let (app, _) = app_with_endpoint(&[("FORMS_MAX_BODY_BYTES", "1000")]).await;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..20).map(|_| Ok(b"aaaaaaaaaa".repeat(10))).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = app.post_form("no-such-endpoint", FORM, body, &[]).await;
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "request_body_too_large");
    assert_eq!(body["error"]["details"]["limit_bytes"], 1000);

    // At the limit exactly, without a declared length, it is read and stored.
    let exact = format!("a={}", "b".repeat(998));
    let stream = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(exact.into_bytes())]);
    post_contact(&app, FORM, reqwest::Body::wrap_stream(stream), 202).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn submission_and_delivery_are_one_transaction() {
    let (app, _) = app_with_endpoint(&[]).await;
    // Make the second insert fail: a trigger that raises when a delivery is written.
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "CREATE FUNCTION refuse_delivery() RETURNS trigger LANGUAGE plpgsql AS
         $$ BEGIN RAISE EXCEPTION 'injected failure between the two inserts'; END $$",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    diesel::sql_query(
        "CREATE TRIGGER refuse_delivery BEFORE INSERT ON webhook_deliveries
         FOR EACH ROW EXECUTE FUNCTION refuse_delivery()",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let body = post_contact(&app, FORM, "a=1", 503).await;
    assert_eq!(body["error"]["code"], "storage_unavailable");
    assert!(
        !body.to_string().contains("injected"),
        "no driver message: {body}"
    );
    assert_eq!(app.stored_counts().await, (0, 0), "neither row");

    diesel::sql_query("DROP TRIGGER refuse_delivery ON webhook_deliveries")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &[]).await.status(),
        202
    );
    assert_eq!(app.stored_counts().await, (1, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn accepting_a_delivery_notifies_the_workers() {
    use futures_util::StreamExt;
    let (app, _) = app_with_endpoint(&[]).await;
    let mut listener = app.db.connect().await;
    diesel::sql_query(format!(
        "LISTEN {}",
        hymical_forms::testing::db::listen::DELIVERY_DUE
    ))
    .execute(&mut listener)
    .await
    .unwrap();
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &[]).await.status(),
        202
    );
    let mut notifications = std::pin::pin!(listener.notifications_stream());
    let notification =
        tokio::time::timeout(std::time::Duration::from_secs(10), notifications.next())
            .await
            .expect("a wake-up within 10 s")
            .expect("stream open")
            .expect("notification");
    assert_eq!(
        notification.channel,
        hymical_forms::testing::db::listen::DELIVERY_DUE
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_failure_is_503() {
    let (app, _) = app_with_endpoint(&[]).await;
    app.db.drop_now().await;
    let body = post_contact(&app, FORM, "a=1", 503).await;
    assert_eq!(body["error"]["code"], "storage_unavailable");
}

/// Every statement a submission makes (endpoint, rate limits, idempotency, the outbox
/// insert) is prepared once per connection and reused: none is re-planned per request.
#[tokio::test(flavor = "multi_thread")]
async fn submissions_reuse_prepared_statements() {
    let db = support::harness::TestDb::new().await;
    let (app, counter) = TestApp::start_logged(db, &[]).await;
    app.webhook_endpoint("contact", "https://example.com/hook")
        .await;
    app.submit("contact", "a=0").await;
    counter.reset();
    let submissions = 50;
    for n in 0..submissions {
        let response = app
            .post_form(
                "contact",
                Some("application/x-www-form-urlencoded"),
                format!("a={n}"),
                &[("idempotency-key", &format!("prepared-statement-key-{n}"))],
            )
            .await;
        let status = response.status();
        assert_eq!(status, 202, "{}", response.text().await.unwrap_or_default());
    }
    let prepared = counter.prepared();
    let mut per_statement = std::collections::HashMap::<&str, usize>::new();
    for sql in &prepared {
        *per_statement.entry(sql.as_str()).or_default() += 1;
    }
    for (sql, times) in &per_statement {
        assert!(
            *times <= 4,
            "prepared {times} times for {submissions} submissions: {sql}"
        );
    }
    assert!(
        prepared.len() <= 4 * 6,
        "{} prepares for {submissions} submissions: {per_statement:#?}",
        prepared.len()
    );
}

/// What the API shows of a stored submission: `fieldCount` and `fields`.
async fn stored_through_graphql(app: &TestApp, key: &str, submission_id: &str) -> Value {
    let body = app
        .gql(
            key,
            "query($id: ID!) { submission(id: $id) { fieldCount fields { name values } } }",
            json!({"id": submission_id}),
        )
        .await;
    assert!(body.get("errors").is_none(), "{body}");
    body["data"]["submission"].clone()
}

/// A repeated JSON key keeps every value, in order, as a repeated urlencoded name does,
/// under the same count limit.
#[tokio::test(flavor = "multi_thread")]
async fn json_repeated_keys_keep_every_value_in_order() {
    let (app, _) = app_with_endpoint(&[
        ("FORMS_MAX_FIELDS", "4"),
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ])
    .await;
    let (_, key) = app.create_key("reader").await;

    let receipt = post_contact(&app, JSON, r#"{"a":"1","a":"2"}"#, 202).await;
    assert_eq!(receipt["field_count"], 2, "{receipt}");
    let stored =
        stored_through_graphql(&app, &key, receipt["submission_id"].as_str().unwrap()).await;
    assert_eq!(
        stored,
        json!({"fieldCount": 2, "fields": [{"name": "a", "values": ["1", "2"]}]})
    );

    // Repeats among other keys, strings and arrays alike: the same as the same form
    // urlencoded.
    let as_json = post_contact(
        &app,
        JSON,
        r#"{"a": "1", "b": "x", "a": ["2", "3"], "a": []}"#,
        202,
    )
    .await;
    let as_form = post_contact(&app, FORM, "a=1&b=x&a=2&a=3", 202).await;
    let json_stored =
        stored_through_graphql(&app, &key, as_json["submission_id"].as_str().unwrap()).await;
    assert_eq!(
        json_stored,
        json!({"fieldCount": 4, "fields": [
            {"name": "a", "values": ["1", "2", "3"]},
            {"name": "b", "values": ["x"]}
        ]})
    );
    assert_eq!(
        json_stored,
        stored_through_graphql(&app, &key, as_form["submission_id"].as_str().unwrap()).await
    );
    assert_eq!(app.stored_counts().await.0, 3);

    // Every repeated value counts towards the limit, one by one; nothing more is stored.
    let body = post_contact(
        &app,
        JSON,
        r#"{"a": "1", "a": "2", "a": ["3", "4"], "a": "5"}"#,
        422,
    )
    .await;
    assert_eq!(body["error"]["code"], "too_many_fields");
    assert_eq!(body["error"]["details"], json!({"limit": 4, "received": 5}));
    assert_eq!(app.stored_counts().await.0, 3);
}

/// Every media type stops parsing at the first value past `FORMS_MAX_FIELDS`: a body of
/// 131,072 empty pairs (urlencoded `a&a&…`, JSON repeats and array items, multipart
/// parts) whose tail would not even parse is `422 too_many_fields` with `received` the
/// limit plus one, never a malformed body, and nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn every_media_type_stops_at_the_first_value_past_the_field_limit() {
    let (app, _) = app_with_endpoint(&[
        ("FORMS_MAX_FIELDS", "100"),
        ("FORMS_MAX_BODY_BYTES", "8388608"),
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ])
    .await;
    let many = 131_072;
    let bodies = [
        (FORM, format!("{}n=%FF", "a&".repeat(many))),
        (JSON, format!("{{{} nonsense", r#""a": "", "#.repeat(many))),
        (
            JSON,
            format!(r#"{{"a": [{} nonsense"#, r#""", "#.repeat(many)),
        ),
        (
            Some("multipart/form-data; boundary=XyZ"),
            format!(
                "{}--XyZ\r\nno part at all",
                "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n\r\n".repeat(many)
            ),
        ),
    ];
    for (content_type, body) in bodies {
        let response = app.post_form("contact", content_type, body, &[]).await;
        assert_eq!(response.status(), 422, "{content_type:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "too_many_fields", "{answer}");
        assert_eq!(
            answer["error"]["details"],
            json!({"limit": 100, "received": 101}),
            "{content_type:?}"
        );
    }
    assert_eq!(app.stored_counts().await.0, 0);
}

/// A part with `filename*=` (or any file-name parameter, in any case) is a file and
/// refused; a quoted name that merely contains such text is a text field.
#[tokio::test(flavor = "multi_thread")]
async fn multipart_extended_file_names_are_refused_and_nothing_is_stored() {
    let (app, _) = app_with_endpoint(&[("FORMS_RATE_LIMIT_ENABLED", "false")]).await;
    let part = |disposition: &str| {
        format!(
            "--B\r\nContent-Disposition: {disposition}\r\nContent-Type: application/pdf\r\n\r\n%PDF-1.7\r\n--B\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@example.com\r\n--B--\r\n"
        )
    };
    for disposition in [
        "form-data; name=\"cv\"; filename*=UTF-8''cv.pdf",
        "form-data; name=\"cv\"; FILENAME*=utf-8''cv.pdf",
        "form-data; name=\"cv\"; Filename=\"cv.pdf\"",
        "form-data; name=\"cv\"; filename*0=\"cv\"; filename*1=\".pdf\"",
    ] {
        let response = app
            .post_form(
                "contact",
                Some("multipart/form-data; boundary=B"),
                part(disposition),
                &[],
            )
            .await;
        assert_eq!(response.status(), 422, "{disposition}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "file_upload_not_supported", "{body}");
        assert_eq!(body["error"]["details"], json!({"field": "cv"}));
        assert_eq!(app.stored_counts().await, (0, 0), "{disposition}");
    }

    // A quote that never closes hides where the parameters end: refused, not guessed at.
    let body = post_contact(
        &app,
        Some("multipart/form-data; boundary=B"),
        part("form-data; name=\"cv; filename*=UTF-8''cv.pdf"),
        400,
    )
    .await;
    assert_eq!(body["error"]["code"], "malformed_form_body");
    assert_eq!(app.stored_counts().await, (0, 0));

    // The text inside a quoted name is the name, whatever it says.
    post_contact(
        &app,
        Some("multipart/form-data; boundary=B"),
        part("form-data; name=\"x; filename*=y\""),
        202,
    )
    .await;
    let stored = only_submission(&app).await;
    assert_eq!(
        stored.fields,
        r#"{"x; filename*=y":["%PDF-1.7"],"email":["a@example.com"]}"#
    );
}
