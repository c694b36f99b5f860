//! `GET /submissions/export` and retention.

use std::sync::Arc;

use diesel_async::SimpleAsyncConnection;
use futures_util::StreamExt;
use hymical_forms::testing::clock::SystemClock;
use serde_json::Value;

use support::harness::{
    assert_invalid_input, endpoint, wait_for_status, ServeProcess, TestApp, TestDb,
};

async fn export(app: &TestApp, key: &str, query: &str) -> reqwest::Response {
    app.http
        .get(app.url(&format!("/submissions/export?{query}")))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn csv_and_json_exports() {
    let app = TestApp::start_without_rate_limit().await;
    let (_, key) = app.create_key("exporter").await;
    app.insert_endpoint(&endpoint("contact")).await;
    app.submit(
        "contact",
        "%3Dname=%3DHYPERLINK(%22x%22)&empty=&note=Zo%C3%AB%2C+%22hi%22",
    )
    .await;
    app.submit("contact", "other=1&%3Dname=b").await;

    let response = export(&app, &key, "format=csv").await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let disposition = response.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        disposition.starts_with("attachment; filename=\"hymical-submissions-")
            && disposition.ends_with(".csv\""),
        "{disposition}"
    );
    let csv = response.text().await.unwrap();
    let lines: Vec<&str> = csv.split("\r\n").collect();
    // Newest first; the header is the union of names in order of first appearance.
    assert_eq!(
        lines[0],
        "submission_id,endpoint_id,received_at,other,'=name,empty,note"
    );
    assert!(
        lines[1].ends_with(",\"[\"\"1\"\"]\",\"[\"\"b\"\"]\",,"),
        "absent fields are empty cells: {}",
        lines[1]
    );
    assert!(
        lines[2].ends_with(r#",,"[""=HYPERLINK(\""x\"")""]","[""""]","[""Zoë, \""hi\""""]""#),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "", "CRLF after the last row");

    let response = export(&app, &key, "format=json").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let submissions = body["submissions"].as_array().unwrap();
    assert_eq!(submissions.len(), 2);
    assert_eq!(submissions[1]["fields"]["note"][0], "Zoë, \"hi\"");
    let keys: Vec<&String> = submissions[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "endpoint_id", "received_at", "fields"]);

    for (query, status, code) in [
        ("format=xml", 422, "unsupported_export_format"),
        (
            "received_after=2026-02-01T00:00:00Z&received_before=2026-01-01T00:00:00Z",
            422,
            "invalid_time_range",
        ),
        ("received_after=yesterday", 422, "invalid_input"),
    ] {
        let response = export(&app, &key, query).await;
        assert_eq!(response.status(), status, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code);
    }
    let response = app
        .http
        .get(app.url("/submissions/export"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "authentication_required");
}

#[tokio::test(flavor = "multi_thread")]
async fn too_large_at_the_limit_plus_one_and_not_at_the_limit() {
    let app = TestApp::start_with(
        &[
            ("FORMS_EXPORT_MAX_SUBMISSIONS", "3"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    let (_, key) = app.create_key("exporter").await;
    app.insert_endpoint(&endpoint("contact")).await;
    for n in 0..3 {
        app.submit("contact", &format!("n={n}")).await;
    }
    let response = export(&app, &key, "format=json").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["submissions"].as_array().unwrap().len(), 3);
    app.submit("contact", "n=3").await;
    let response = export(&app, &key, "format=csv").await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "export_too_large");
    assert_eq!(body["error"]["details"]["limit"], 3);
    assert_eq!(body["error"]["details"]["count"], 4);
    // A narrower filter fits again.
    let response = export(&app, &key, "format=json&endpoint_id=elsewhere").await;
    assert_eq!(response.status(), 200);
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Inserts `count` submissions of about 300 bytes each to endpoint `bulk`, numbered from
/// `first`.
async fn insert_bulk(conn: &mut diesel_async::AsyncPgConnection, first: u64, count: u64) {
    let filler = "x".repeat(300);
    let last = first + count - 1;
    conn.batch_execute(&format!(
        "INSERT INTO submissions (id, endpoint_id, received_at, fields)
             SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'bulk', now() - n * interval '1 millisecond', json_build_object('n', json_build_array(n::text), 'filler', json_build_array('{filler}'))
             FROM generate_series({first}, {last}) AS n;"
    ))
    .await
    .unwrap();
}

/// Streams the whole JSON export; answers its size in bytes.
async fn export_all(serve: &ServeProcess, key: &str) -> usize {
    let response = reqwest::Client::new()
        .get(serve.url("/submissions/export?format=json"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut total = 0usize;
    let mut tail = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        total += chunk.len();
        tail = chunk.to_vec();
    }
    assert!(tail.ends_with(b"]}"), "a complete document");
    total
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_export_of_100000_submissions_streams_with_flat_memory() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    conn.batch_execute("INSERT INTO endpoints (id, name) VALUES ('bulk', 'Bulk');")
        .await
        .unwrap();
    insert_bulk(&mut conn, 1, 100_000).await;
    let serve = ServeProcess::start(
        &db,
        &[
            ("FORMS_EXPORT_MAX_SUBMISSIONS", "200000"),
            ("FORMS_WORKER_ENABLED", "false"),
        ],
    );
    wait_for_status(&serve.url("/ready"), 200).await;
    let key = {
        let app = TestApp::start_on(db.clone(), &[], Arc::new(SystemClock)).await;
        app.create_key("bulk").await.1
    };
    let before = peak_rss_kib(serve.child.id());
    let first_total = export_all(&serve, &key).await;
    let after_first = peak_rss_kib(serve.child.id());
    assert!(first_total > 30_000_000, "{first_total} bytes exported");
    // The whole export is over 30 MB; the server's peak memory grew by a small fraction.
    let first_growth_kib = after_first.saturating_sub(before);
    assert!(
        first_growth_kib < 15_000,
        "peak RSS grew by {first_growth_kib} KiB for a {first_total}-byte export"
    );
    // Twice the rows: the peak stays where the first export left it, so that growth was
    // a fixed cost, not one that scales with the export.
    insert_bulk(&mut conn, 100_001, 100_000).await;
    let second_total = export_all(&serve, &key).await;
    let after_second = peak_rss_kib(serve.child.id());
    assert!(
        second_total > 2 * first_total - 1_000_000,
        "{second_total} bytes exported"
    );
    let second_growth_kib = after_second.saturating_sub(after_first);
    assert!(
        second_growth_kib < 5_000,
        "peak RSS grew by {second_growth_kib} KiB more for a {second_total}-byte export \
         (the {first_total}-byte one had grown it by {first_growth_kib} KiB)"
    );
    let (status, _) = serve.stop();
    assert!(status.success());
}

#[derive(diesel::QueryableByName, Debug)]
struct Row {
    #[diesel(sql_type = diesel::sql_types::Text)]
    id: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_deletes_only_old_submissions_nothing_still_needs() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let secret = format!("whsec_{}", "ab".repeat(32));
    conn.batch_execute(&format!(
        "INSERT INTO endpoints (id, name, webhook_url, webhook_secret) VALUES ('ret', 'Ret', 'https://a.example/h', '{secret}');
         INSERT INTO submissions (id, endpoint_id, received_at, fields) VALUES
             ('sub_{a}', 'ret', now() - interval '40 days', '{{}}'),
             ('sub_{b}', 'ret', now() - interval '40 days', '{{}}'),
             ('sub_{c}', 'ret', now() - interval '40 days', '{{}}'),
             ('sub_{d}', 'ret', now() - interval '40 days', '{{}}'),
             ('sub_{e}', 'ret', now() - interval '2 days', '{{}}');
         INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at, completed_at) VALUES
             ('whd_{b}', 'sub_{b}', 'ret', 'https://a.example/h', '{secret}', 'delivered', 1, 1, now(), now(), now()),
             ('whd_{c}', 'sub_{c}', 'ret', 'https://a.example/h', '{secret}', 'failed', 5, 5, now(), now(), now()),
             ('whd_{d}', 'sub_{d}', 'ret', 'https://a.example/h', '{secret}', 'pending', 0, 0, now(), now(), NULL);
         INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at, outcome, response_status)
             VALUES ('att_{b}', 'whd_{b}', 'sub_{b}', 1, 'https://a.example/h', now(), 'succeeded', 200);",
        a = "a".repeat(32), b = "b".repeat(32), c = "c".repeat(32), d = "d".repeat(32), e = "e".repeat(32),
    ))
    .await
    .unwrap();
    let run = |args: &[&str]| {
        let output = db.run_cli(args);
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, _, stderr) = run(&["retention"]);
    assert!(!ok && stderr.contains("--older-than-days"), "{stderr}");
    // An age beyond any storable date is an error that says so, not a panic.
    let (ok, _, stderr) = run(&["retention", "--older-than-days", "4000000000"]);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("smaller number of days"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (ok, stdout, _) = run(&["retention", "--dry-run", "--older-than-days", "30"]);
    assert!(ok && stdout.starts_with("would delete 2 "), "{stdout}");
    assert_eq!(
        remaining(&mut conn).await.len(),
        5,
        "a dry run deletes nothing"
    );
    let (ok, stdout, stderr) = run(&["retention", "--older-than-days", "30", "--batch-size", "1"]);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("deleted 2 "), "{stdout}");
    let left = remaining(&mut conn).await;
    assert_eq!(
        left,
        [
            format!("sub_{}", "c".repeat(32)),
            format!("sub_{}", "d".repeat(32)),
            format!("sub_{}", "e".repeat(32))
        ]
    );
    // The delivered submission's delivery and history stay, without it.
    let app = TestApp::start_on(db.clone(), &[], Arc::new(SystemClock)).await;
    let delivered = app.db.delivery(&format!("whd_{}", "b".repeat(32))).await;
    assert_eq!(
        (delivered.state.as_str(), delivered.submission_id.clone()),
        ("delivered", None)
    );
    assert_eq!(app.db.attempts(&delivered.id).await.len(), 1);
}

async fn remaining(conn: &mut diesel_async::AsyncPgConnection) -> Vec<String> {
    use diesel_async::RunQueryDsl;
    diesel::sql_query("SELECT id FROM submissions ORDER BY id")
        .load::<Row>(conn)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect()
}

const CREATE: &str = "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id retentionDays spamRetentionDays } } }";
const UPDATE: &str = "mutation($input: UpdateEndpointInput!) { updateEndpoint(input: $input) { endpoint { id retentionDays spamRetentionDays } } }";

/// Each endpoint keeps its submissions for days of its own, set through the API, the
/// server's days standing for those that set none: `short` keeps its inbox 1 day and its
/// spam for ever, `forever` keeps its inbox for ever, `plain` follows the server (30 days,
/// spam 7). One pass deletes exactly what each endpoint's days say, and an
/// autoresponder's record of an address goes with its submission. Days outside 0 to
/// 1,000,000 are refused by name and change nothing.
#[tokio::test(flavor = "multi_thread")]
async fn each_endpoint_keeps_submissions_for_its_own_days() {
    let db = TestDb::new().await;
    let app = TestApp::start_on(db.clone(), &[], Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("retention").await;
    let gql = |query: &'static str, input: Value| {
        let (app, key) = (&app, &key);
        async move {
            app.gql(key, query, serde_json::json!({ "input": input }))
                .await
        }
    };
    let created = gql(
        CREATE,
        serde_json::json!({"id": "short", "name": "Short", "retentionDays": 1, "spamRetentionDays": 0}),
    )
    .await;
    assert_eq!(
        created["data"]["createEndpoint"]["endpoint"],
        serde_json::json!({"id": "short", "retentionDays": 1, "spamRetentionDays": 0})
    );
    gql(
        CREATE,
        serde_json::json!({"id": "forever", "name": "Forever"}),
    )
    .await;
    gql(
        CREATE,
        serde_json::json!({"id": "plain", "name": "Plain", "retentionDays": 5}),
    )
    .await;
    let updated = gql(
        UPDATE,
        serde_json::json!({"id": "forever", "retentionDays": 0}),
    )
    .await;
    assert_eq!(
        updated["data"]["updateEndpoint"]["endpoint"]["retentionDays"],
        0
    );
    // `null` gives the server's back.
    let updated = gql(
        UPDATE,
        serde_json::json!({"id": "plain", "retentionDays": null}),
    )
    .await;
    assert_eq!(
        updated["data"]["updateEndpoint"]["endpoint"]["retentionDays"],
        Value::Null
    );
    for (query, input, field) in [
        (
            CREATE,
            serde_json::json!({"id": "bad", "name": "Bad", "retentionDays": -1}),
            "retentionDays",
        ),
        (
            UPDATE,
            serde_json::json!({"id": "short", "spamRetentionDays": 1_000_001}),
            "spamRetentionDays",
        ),
        (
            UPDATE,
            serde_json::json!({"id": "short", "retentionDays": 7, "spamRetentionDays": -5}),
            "spamRetentionDays",
        ),
    ] {
        let refused = gql(query, input).await;
        assert_invalid_input(&refused, field);
    }
    let short = gql(UPDATE, serde_json::json!({"id": "short"})).await;
    assert_eq!(
        short["data"]["updateEndpoint"]["endpoint"],
        serde_json::json!({"id": "short", "retentionDays": 1, "spamRetentionDays": 0}),
        "a refused change stores nothing"
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM endpoints WHERE id = 'bad'")
            .await,
        0
    );

    // Each endpoint: an inbox submission 3 days old and one 40 days old, spam 10 days old.
    let mut conn = db.connect().await;
    // Ids in the stored format, named `{endpoint}_{age}` here.
    let mut ids = std::collections::HashMap::new();
    let mut rows = Vec::new();
    for endpoint in ["short", "forever", "plain"] {
        for (age, spam) in [(3, false), (40, false), (10, true)] {
            let id = format!("sub_{:032x}", ids.len() + 1);
            rows.push(format!(
                "('{id}', '{endpoint}', now() - interval '{age} days', '{{}}', {spam})"
            ));
            ids.insert(id, format!("{endpoint}_{age}"));
        }
    }
    let id_of = |name: &str| ids.iter().find(|(_, n)| *n == name).unwrap().0.clone();
    conn.batch_execute(&format!(
        "INSERT INTO submissions (id, endpoint_id, received_at, fields, spam) VALUES {};
         INSERT INTO autoresponder_recipients (destination_id, address_digest, quiet_until, submission_id)
             VALUES ('dst_x', 'digest-short-40', now() + interval '1 day', '{}'),
                    ('dst_x', 'digest-plain-3', now() + interval '1 day', '{}');",
        rows.join(", "),
        id_of("short_40"),
        id_of("plain_3"),
    ))
    .await
    .unwrap();
    let days = ["--older-than-days", "30", "--spam-older-than-days", "7"];
    let dry = db.cli_stdout(&[&["retention", "--dry-run"][..], &days[..]].concat());
    assert!(dry.starts_with("would delete 5 "), "{dry}");
    let done = db.cli_stdout(&[&["retention", "--batch-size", "1"][..], &days[..]].concat());
    assert!(done.starts_with("deleted 5 "), "{done}");
    let mut left: Vec<String> = remaining(&mut conn)
        .await
        .iter()
        .map(|id| ids[id].clone())
        .collect();
    left.sort();
    assert_eq!(left, ["forever_3", "forever_40", "plain_3", "short_10"]);
    let kept = format!(
        "SELECT count(*) AS n FROM autoresponder_recipients WHERE submission_id = '{}'",
        id_of("plain_3")
    );
    assert_eq!(
        app.db.count(&kept).await,
        1,
        "the kept submission's record stays"
    );
    let all = "SELECT count(*) AS n FROM autoresponder_recipients";
    assert_eq!(app.db.count(all).await, 1, "the deleted one's goes");
}
