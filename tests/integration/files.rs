//! File uploads (docs/intake.md, "Files") against real storage: PostgreSQL, and a real
//! S3-compatible server on loopback (moto in server mode, from PyPI, which
//! `cargo xtask setup` installs). Each limit, a program named `.png`, an endpoint without
//! files refusing them as before, a refusal late in the body and a client gone mid-body
//! leaving nothing, the webhook's file metadata checked against what was sent, download
//! links that expire and refuse tampering, erase removing the bytes, a 100 MB file
//! through a `serve` process whose memory is sampled, a `serve` process SIGKILLed
//! mid-upload and restarted (its sweeper leaves no row and no object), and a plain HTML
//! form with a file input submitted by headless Chromium.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use futures_util::StreamExt;
use hymical_forms::testing::clock::{ManualClock, SystemClock};
use object_store::ObjectStore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use support::harness::{
    assert_invalid_input, data, free_port, graphql_data, ServeProcess, TestApp, TestDb,
};
use support::receiver::Receiver;

const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
];

const BOUNDARY: &str = "----hymicalFilesTest7MA4YWxkTrZu0gW";

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const ELF: &[u8] =
    b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0\x3e\0\x01\0\0\0\x80\x10\x40\0\0\0\0\0";

/// One part of a multipart body.
enum Part<'a> {
    Text(&'a str, &'a str),
    /// Field, file name, bytes.
    File(&'a str, &'a str, &'a [u8]),
}

fn multipart(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for part in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        match part {
            Part::Text(name, value) => {
                body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                        .as_bytes(),
                );
            }
            Part::File(name, file_name, bytes) => {
                body.extend_from_slice(
                    format!(
                        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                    )
                    .as_bytes(),
                );
                body.extend_from_slice(bytes);
                body.extend_from_slice(b"\r\n");
            }
        }
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

fn content_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Creates `id` through GraphQL with file uploads on (`settings`: the `fileUploads`
/// input) and, when given, a webhook; answers the endpoint as GraphQL returns it.
async fn create_endpoint(
    app: &TestApp,
    key: &str,
    id: &str,
    webhook: Option<&str>,
    settings: Value,
) -> Value {
    data(
        app.gql(
            key,
            "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id fileUploads { maxFiles maxFileBytes maxTotalBytes allowedTypes } } } }",
            json!({ "input": { "id": id, "name": "Files", "webhookUrl": webhook, "fileUploads": settings } }),
        )
        .await,
    )["createEndpoint"]["endpoint"]
        .clone()
}

/// Rows of the files' tables: (submission_files, submission_file_chunks).
async fn file_rows(db: &TestDb) -> (i64, i64) {
    (
        db.count("SELECT count(*) AS n FROM submission_files").await,
        db.count("SELECT count(*) AS n FROM submission_file_chunks")
            .await,
    )
}

async fn post(app: &TestApp, endpoint: &str, body: Vec<u8>) -> (u16, Value) {
    let response = app
        .post_form(endpoint, Some(&content_type()), body, &[])
        .await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Polls `check` for up to 20 s.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never: {what}");
}

/// Splits a download link into (path with query, expires, signature).
fn link_parts(url: &str) -> (String, String, String) {
    let path = url
        .split_once("//")
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(_, path)| format!("/{path}"))
        .unwrap();
    let query = path.split_once('?').unwrap().1;
    let mut expires = String::new();
    let mut signature = String::new();
    for pair in query.split('&') {
        match pair.split_once('=').unwrap() {
            ("expires", value) => expires = value.to_string(),
            ("signature", value) => signature = value.to_string(),
            _ => {}
        }
    }
    (path, expires, signature)
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_files_reach_the_webhook_with_links_that_expire_and_refuse_tampering() {
    let receiver = Receiver::start().await;
    let start = Utc.with_ymd_and_hms(2026, 12, 6, 9, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = TestApp::start_with(DEV, clock.clone()).await;
    let (_, key) = app.create_key("files").await;
    let endpoint = create_endpoint(
        &app,
        &key,
        "uploads",
        Some(&receiver.url("/hook")),
        json!({ "maxFiles": 3 }),
    )
    .await;
    assert_eq!(endpoint["fileUploads"]["maxFiles"], 3);
    assert_eq!(endpoint["fileUploads"]["maxFileBytes"], 10 << 20);
    assert!(endpoint["fileUploads"]["allowedTypes"]
        .as_array()
        .unwrap()
        .contains(&json!("image/png")));

    // A picture of 600 KiB (three chunk rows), a CSV named with RFC 8187, a text field.
    let mut picture = PNG.to_vec();
    picture.extend((0..600 * 1024).map(|i| (i * 7 % 251) as u8));
    let csv = "name,amount\nZoë,3\n".as_bytes();
    let mut body = Vec::new();
    body.extend_from_slice(
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n")
            .as_bytes(),
    );
    body.extend_from_slice(format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"C:\\\\Users\\\\me\\\\cat.png\"\r\nContent-Type: image/png\r\n\r\n").as_bytes());
    body.extend_from_slice(&picture);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"sheet\"; filename*=UTF-8''%E2%82%AC%20costs.csv\r\n\r\n").as_bytes());
    body.extend_from_slice(csv);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    let (status, receipt) = post(&app, "uploads", body).await;
    assert_eq!(status, 202, "{receipt}");
    assert_eq!(receipt["field_count"], 1);
    let submission = receipt["submission_id"].as_str().unwrap().to_string();
    assert_eq!(file_rows(&app.db).await, (2, 4));

    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let received = receiver.wait_for(1).await;
    let payload: Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(
        payload["submission"]["fields"],
        json!({ "note": ["hello"] })
    );
    let files = payload["submission"]["files"].as_array().unwrap().clone();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["field"], "photo");
    assert_eq!(files[0]["name"], "cat.png");
    assert_eq!(files[0]["content_type"], "image/png");
    assert_eq!(files[0]["size"], picture.len());
    assert_eq!(files[0]["sha256"], sha256_hex(&picture));
    assert_eq!(files[1]["name"], "€ costs.csv");
    assert_eq!(files[1]["content_type"], "text/csv");
    assert_eq!(files[1]["sha256"], sha256_hex(csv));
    // Links expire seven days after the submission's receipt.
    assert_eq!(files[0]["url_expires_at"], "2026-12-13T09:00:00.000000Z");
    assert!(!String::from_utf8_lossy(&received[0].body).contains("IHDR"));

    let url = files[0]["url"].as_str().unwrap();
    assert!(url.starts_with("http://127.0.0.1:8080/files/fil_"), "{url}");
    let (path, expires, signature) = link_parts(url);
    let download = app.http.get(app.url(&path)).send().await.unwrap();
    assert_eq!(download.status(), 200);
    assert_eq!(download.headers()["content-type"], "image/png");
    assert_eq!(download.headers()["x-content-type-options"], "nosniff");
    assert!(download.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment;"));
    assert_eq!(download.bytes().await.unwrap(), picture);

    // Tampering: another expiry, another signature, another file, no signature.
    let file_path = path.split_once('?').unwrap().0.to_string();
    let later = expires.parse::<i64>().unwrap() + 86_400;
    let mut flipped = signature.clone().into_bytes();
    flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
    let other_file = link_parts(files[1]["url"].as_str().unwrap()).0;
    let other_file = other_file.split_once('?').unwrap().0;
    for tampered in [
        format!("{file_path}?expires={later}&signature={signature}"),
        format!(
            "{file_path}?expires={expires}&signature={}",
            String::from_utf8(flipped).unwrap()
        ),
        format!("{other_file}?expires={expires}&signature={signature}"),
        format!("{file_path}?expires={expires}"),
    ] {
        let response = app.http.get(app.url(&tampered)).send().await.unwrap();
        assert_eq!(response.status(), 403, "{tampered}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "file_link_invalid", "{error}");
    }

    // Seven days later the webhook's link is gone (410); the operator's view gives fresh
    // links, valid from now.
    clock.advance(chrono::Duration::days(7));
    let expired = app.http.get(app.url(&path)).send().await.unwrap();
    assert_eq!(expired.status(), 410);
    let error: Value = expired.json().await.unwrap();
    assert_eq!(error["error"]["code"], "file_link_expired");
    let answer = data(
        app.gql(
            &key,
            "query($id: ID!) { submission(id: $id) { files { id field name size contentType sha256 downloadUrl downloadUrlExpiresAt } } }",
            json!({ "id": submission }),
        )
        .await,
    );
    let listed = answer["submission"]["files"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["sha256"], sha256_hex(&picture));
    assert_eq!(listed[0]["contentType"], "image/png");
    assert_eq!(listed[1]["size"], csv.len());
    assert_eq!(
        listed[1]["downloadUrlExpiresAt"],
        "2026-12-20T09:00:00.000000Z"
    );
    let fresh = link_parts(listed[1]["downloadUrl"].as_str().unwrap()).0;
    let response = app.http.get(app.url(&fresh)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap(), csv);

    // Erase: the rows and the bytes go, and the link finds nothing.
    data(
        app.gql(
            &key,
            "mutation($id: ID!) { deleteSubmission(id: $id) { deletedSubmissionId } }",
            json!({ "id": submission }),
        )
        .await,
    );
    assert_eq!(file_rows(&app.db).await, (0, 0));
    let response = app.http.get(app.url(&fresh)).send().await.unwrap();
    assert_eq!(response.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_limit_and_type_rule_refuses_and_stores_nothing() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(
        &app,
        &key,
        "limited",
        None,
        json!({ "maxFiles": 2, "maxFileBytes": 1000, "maxTotalBytes": 1500, "allowedTypes": ["image/*", "text/plain"] }),
    )
    .await;
    let text = b"plain words\n".repeat(10);
    let big = [b"a".repeat(1001)];
    let seven_hundred = b"b".repeat(700);
    let nine_hundred = b"c".repeat(900);
    let cases: Vec<(Vec<u8>, u16, &str, Value)> = vec![
        (
            multipart(&[
                Part::File("a", "1.txt", &text),
                Part::File("b", "2.txt", &text),
                Part::File("c", "3.txt", &text),
            ]),
            422,
            "too_many_files",
            json!({ "limit": 2 }),
        ),
        (
            multipart(&[Part::File("a", "big.txt", &big[0])]),
            413,
            "file_too_large",
            json!({ "field": "a", "limit": "max_file_bytes", "limit_bytes": 1000 }),
        ),
        (
            multipart(&[
                Part::File("a", "1.txt", &seven_hundred),
                Part::File("b", "2.txt", &nine_hundred),
            ]),
            413,
            "file_too_large",
            json!({ "field": "b", "limit": "max_total_bytes", "limit_bytes": 1500 }),
        ),
        (
            multipart(&[Part::File("photo", "holiday.png", ELF)]),
            422,
            "file_type_not_allowed",
            json!({ "field": "photo", "detected": "application/x-executable", "executable": true }),
        ),
        (
            multipart(&[Part::File("run", "run.txt", b"#!/bin/sh\nrm -rf /\n")]),
            422,
            "file_type_not_allowed",
            json!({ "field": "run", "detected": "application/x-shellscript", "executable": true }),
        ),
        (
            multipart(&[Part::File("cv", "cv.pdf", b"%PDF-1.7\n1 0 obj\n")]),
            422,
            "file_type_not_allowed",
            json!({ "field": "cv", "detected": "application/pdf", "executable": false }),
        ),
        (
            // Stored first, refused after: a field value over FORMS_MAX_FIELD_VALUE_LENGTH.
            multipart(&[
                Part::File("a", "ok.png", PNG),
                Part::Text("note", &"x".repeat(20_000)),
            ]),
            422,
            "field_value_too_long",
            Value::Null,
        ),
        (
            // A malformed end after a stored file.
            {
                let mut body = multipart(&[Part::File("a", "ok.png", PNG)]);
                body.truncate(body.len() - 10);
                body
            },
            400,
            "malformed_form_body",
            Value::Null,
        ),
    ];
    for (body, status, code, details) in cases {
        let (got, answer) = post(&app, "limited", body).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str().unwrap()),
            (status, code),
            "{answer}"
        );
        if !details.is_null() {
            assert_eq!(answer["error"]["details"], details, "{answer}");
        }
        assert_eq!(app.stored_counts().await.0, 0, "{code}");
        assert_eq!(
            file_rows(&app.db).await,
            (0, 0),
            "{code}: nothing left stored"
        );
    }

    // A declared length past the endpoint's total plus the text budget: refused unread.
    let response = app
        .post_form(
            "limited",
            Some(&content_type()),
            vec![b'x'; 1500 + 262_144 + 1],
            &[],
        )
        .await;
    assert_eq!(response.status(), 413);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "request_body_too_large");
    assert_eq!(answer["error"]["details"]["limit_bytes"], 1500 + 262_144);

    // Within every limit: stored. A file input left empty is no file.
    let (status, answer) = post(
        &app,
        "limited",
        multipart(&[
            Part::File("a", "1.txt", &seven_hundred),
            Part::File("b", "", b""),
            Part::File("c", "2.png", PNG),
        ]),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(file_rows(&app.db).await.0, 2);

    // The rules of the settings, by input field.
    for (settings, field) in [
        (json!({ "maxFiles": 0 }), "fileUploads.maxFiles"),
        (
            json!({ "maxFileBytes": 10, "maxTotalBytes": 5 }),
            "fileUploads.maxTotalBytes",
        ),
        (
            json!({ "allowedTypes": ["application/x-executable"] }),
            "fileUploads.allowedTypes",
        ),
        (
            json!({ "allowedTypes": ["png"] }),
            "fileUploads.allowedTypes",
        ),
    ] {
        let answer = app
            .gql(
                &key,
                "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }",
                json!({ "input": { "id": "bad", "name": "Bad", "fileUploads": settings } }),
            )
            .await;
        assert_invalid_input(&answer, field);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_without_files_refuses_them_as_before_until_turned_on() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    data(
        app.gql(
            &key,
            "mutation { createEndpoint(input: { id: \"plain\", name: \"Plain\" }) { endpoint { id fileUploads { maxFiles } } } }",
            json!({}),
        )
        .await,
    );
    let (status, answer) = post(
        &app,
        "plain",
        multipart(&[Part::Text("a", "1"), Part::File("cv", "cv.png", PNG)]),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(answer["error"]["code"], "file_upload_not_supported");
    assert_eq!(answer["error"]["details"]["field"], "cv");
    assert_eq!(app.stored_counts().await.0, 0);
    assert_eq!(file_rows(&app.db).await, (0, 0));

    // Turned on, the same body is stored; turned off again, refused again.
    for (settings, status) in [(json!({}), 202), (Value::Null, 422)] {
        let answer = data(
            app.gql(
                &key,
                "mutation($input: UpdateEndpointInput!) { updateEndpoint(input: $input) { endpoint { fileUploads { maxFiles } } } }",
                json!({ "input": { "id": "plain", "fileUploads": settings } }),
            )
            .await,
        );
        assert_eq!(
            answer["updateEndpoint"]["endpoint"]["fileUploads"].is_null(),
            settings.is_null()
        );
        let (got, answer) =
            post(&app, "plain", multipart(&[Part::File("cv", "cv.png", PNG)])).await;
        assert_eq!(got, status, "{answer}");
    }
}

/// Sends the head of a multipart upload over a raw connection, then closes it.
/// Sends the head of a multipart upload over a raw connection, waits until the server has
/// stored some of it (`stored` of the file tables' rows holds), then closes it.
async fn send_and_drop(
    addr: std::net::SocketAddr,
    db: &TestDb,
    endpoint: &str,
    head: &[u8],
    declared: usize,
    stored: fn((i64, i64)) -> bool,
) {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /f/{endpoint} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {}\r\nContent-Length: {declared}\r\n\r\n",
        content_type()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(head).await.unwrap();
    stream.flush().await.unwrap();
    eventually("the upload stored in part", || async {
        stored(file_rows(db).await)
    })
    .await;
    drop(stream);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_gone_mid_body_leaves_no_row() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "uploads", None, json!({})).await;
    let mut head = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"a.png\"\r\n\r\n"
    )
    .into_bytes();
    head.extend_from_slice(PNG);
    head.extend(std::iter::repeat_n(7u8, 700 * 1024));
    // The file's row and a first piece of it appear while the body streams in.
    send_and_drop(
        app.addr,
        &app.db,
        "uploads",
        &head,
        5 << 20,
        |(rows, chunks)| rows == 1 && chunks > 0,
    )
    .await;
    eventually("nothing left of the dropped upload", || async {
        file_rows(&app.db).await == (0, 0)
    })
    .await;
    assert_eq!(app.stored_counts().await.0, 0);
}

// --- S3-compatible storage: moto in server mode on loopback. ---

/// A moto S3 server on a free loopback port with one bucket, stopped when dropped.
struct Moto {
    child: Child,
    port: u16,
    bucket: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// moto's server: the one `cargo xtask setup` installs under target/, else one on PATH.
fn moto_binary() -> std::path::PathBuf {
    let venv =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/moto-venv/bin/moto_server");
    if venv.is_file() {
        return venv;
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("moto_server"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("moto_server is not installed: `cargo xtask setup` installs it (tests/s3-server/)")
    })
}

impl Moto {
    async fn start() -> Moto {
        let port = free_port();
        let child = Command::new(moto_binary())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let moto = Moto {
            child,
            port,
            bucket: "forms-files".into(),
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // moto takes unsigned requests: this creates the bucket.
            if let Ok(response) = client
                .put(moto.url(&format!("/{}", moto.bucket)))
                .send()
                .await
            {
                assert!(response.status().is_success(), "{}", response.status());
                return moto;
            }
            assert!(Instant::now() < deadline, "moto_server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn vars(&self) -> Vec<(String, String)> {
        [
            ("FORMS_S3_ENDPOINT", self.url("")),
            ("FORMS_S3_BUCKET", self.bucket.clone()),
            ("FORMS_S3_REGION", "us-east-1".into()),
            ("FORMS_S3_ACCESS_KEY_ID", "testing".into()),
            ("FORMS_S3_SECRET_ACCESS_KEY", "testing".into()),
            ("FORMS_S3_PATH_STYLE", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Every object in the bucket, by key.
    async fn objects(&self) -> Vec<String> {
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(self.url(""))
            .with_bucket_name(&self.bucket)
            .with_region("us-east-1")
            .with_access_key_id("testing")
            .with_secret_access_key("testing")
            .with_virtual_hosted_style_request(false)
            .with_allow_http(true)
            .build()
            .unwrap();
        let mut keys = Vec::new();
        let mut listing = store.list(None);
        while let Some(meta) = listing.next().await {
            keys.push(meta.unwrap().location.to_string());
        }
        keys
    }
}

fn with(base: &[(&str, &str)], more: &[(String, String)]) -> Vec<(String, String)> {
    base.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(more.iter().cloned())
        .collect()
}

fn borrowed(vars: &[(String, String)]) -> Vec<(&str, &str)> {
    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_files_are_objects_delivered_downloaded_and_erased() {
    let moto = Moto::start().await;
    let receiver = Receiver::start().await;
    let vars = with(DEV, &moto.vars());
    let app = TestApp::start_with(&borrowed(&vars), Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(
        &app,
        &key,
        "s3-files",
        Some(&receiver.url("/hook")),
        json!({}),
    )
    .await;

    // 6 MiB: more than one part of the object's multipart upload.
    let mut picture = PNG.to_vec();
    picture.extend((0..6 * 1024 * 1024).map(|i| (i % 253) as u8));
    let (status, receipt) = post(
        &app,
        "s3-files",
        multipart(&[
            Part::Text("a", "1"),
            Part::File("photo", "big.png", &picture),
        ]),
    )
    .await;
    assert_eq!(status, 202, "{receipt}");
    let submission = receipt["submission_id"].as_str().unwrap().to_string();
    let objects = moto.objects().await;
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert!(objects[0].starts_with("files/s3-files/fil_"), "{objects:?}");
    assert_eq!(
        file_rows(&app.db).await,
        (1, 0),
        "no chunk rows: the bytes are the object"
    );

    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let received = receiver.wait_for(1).await;
    let payload: Value = serde_json::from_slice(&received[0].body).unwrap();
    let file = &payload["submission"]["files"][0];
    assert_eq!(file["sha256"], sha256_hex(&picture));
    assert_eq!(file["size"], picture.len());
    let (path, _, _) = link_parts(file["url"].as_str().unwrap());
    let download = app.http.get(app.url(&path)).send().await.unwrap();
    assert_eq!(download.status(), 200);
    assert_eq!(
        sha256_hex(&download.bytes().await.unwrap()),
        sha256_hex(&picture)
    );

    // Refused ones leave no object: a program, and a valid file before a bad field.
    for body in [
        multipart(&[Part::File("photo", "cat.png", ELF)]),
        multipart(&[
            Part::File("photo", "ok.png", &picture),
            Part::Text("", "nameless"),
        ]),
    ] {
        let (status, answer) = post(&app, "s3-files", body).await;
        assert_eq!(status, 422, "{answer}");
    }
    assert_eq!(moto.objects().await.len(), 1);
    assert_eq!(file_rows(&app.db).await.0, 1);

    // One person's data erased by their address: their file's object goes too.
    let (status, receipt) = post(
        &app,
        "s3-files",
        multipart(&[
            Part::Text("email", "ada@example.com"),
            Part::File("photo", "ada.png", PNG),
        ]),
    )
    .await;
    assert_eq!(status, 202, "{receipt}");
    assert_eq!(moto.objects().await.len(), 2);
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let erased = data(
        app.gql(
            &key,
            "mutation { erasePersonData(value: \"ADA@example.com\") { erasedSubmissionIds } }",
            json!({}),
        )
        .await,
    );
    assert_eq!(
        erased["erasePersonData"]["erasedSubmissionIds"],
        json!([receipt["submission_id"]])
    );
    assert_eq!(moto.objects().await.len(), 1, "the person's object is gone");
    assert_eq!(file_rows(&app.db).await.0, 1);

    data(
        app.gql(
            &key,
            "mutation($id: ID!) { deleteSubmission(id: $id) { deletedSubmissionId } }",
            json!({ "id": submission }),
        )
        .await,
    );
    assert_eq!(moto.objects().await, Vec::<String>::new());
    assert_eq!(file_rows(&app.db).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_a_client_gone_mid_body_leaves_no_object() {
    let moto = Moto::start().await;
    let vars = with(DEV, &moto.vars());
    let app = TestApp::start_with(&borrowed(&vars), Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(
        &app,
        &key,
        "s3-files",
        None,
        json!({ "maxFileBytes": 20_000_000, "maxTotalBytes": 20_000_000 }),
    )
    .await;
    let mut head = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"a.png\"\r\n\r\n"
    )
    .into_bytes();
    head.extend_from_slice(PNG);
    head.extend(std::iter::repeat_n(7u8, 11 << 20));
    // The file's row is written before the object's first part goes out.
    send_and_drop(
        app.addr,
        &app.db,
        "s3-files",
        &head,
        15 << 20,
        |(rows, _)| rows == 1,
    )
    .await;
    eventually("nothing left of the dropped upload", || async {
        file_rows(&app.db).await == (0, 0)
    })
    .await;
    assert_eq!(moto.objects().await, Vec::<String>::new());
}

// --- A `serve` process: memory over a 100 MB file, and a SIGKILL mid-upload. ---

/// VmRSS and VmHWM of `pid`, in kB.
fn memory_kb(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Creates an endpoint on a `serve` process through GraphQL with a key the CLI made.
async fn serve_endpoint(server: &ServeProcess, db: &TestDb, id: &str, settings: Value) {
    let new = hymical_forms::testing::auth::generate(
        "files",
        hymical_forms::testing::model::state::KeyRole::Admin,
        Utc::now(),
    );
    let mut connection = db.connect().await;
    hymical_forms::testing::db::keys::insert(&mut connection, &new.row)
        .await
        .unwrap();
    graphql_data(
        &reqwest::Client::new(),
        &server.url("/graphql"),
        new.key.expose(),
        "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }",
        json!({ "input": { "id": id, "name": "Files", "fileUploads": settings } }),
    )
    .await;
}

/// A streamed upload of one PNG-headed file of `size` bytes: the body is made as it is
/// sent (the test holds none of it), its SHA-256 computed on the way. `pause_after`: stop
/// sending after that many bytes until the returned sender is dropped.
fn streamed_upload(
    size: usize,
    pause_after: Option<usize>,
) -> (
    reqwest::Body,
    usize,
    Arc<std::sync::Mutex<Sha256>>,
    tokio::sync::oneshot::Sender<()>,
) {
    const PIECE: usize = 64 * 1024;
    let head = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"big.png\"\r\n\r\n"
    );
    let tail = format!("\r\n--{BOUNDARY}--\r\n");
    let total = head.len() + size + tail.len();
    let hash = Arc::new(std::sync::Mutex::new(Sha256::new()));
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let hashing = hash.clone();
    let stream = async_stream::stream! {
        yield Ok::<_, std::io::Error>(bytes::Bytes::from(head));
        let mut sent = 0usize;
        let mut released = Some(released);
        while sent < size {
            if let (Some(pause), Some(wait)) = (pause_after, released.as_mut()) {
                if sent >= pause {
                    let _ = wait.await;
                    released = None;
                }
            }
            let n = PIECE.min(size - sent);
            let mut piece = vec![0u8; n];
            for (i, byte) in piece.iter_mut().enumerate() {
                *byte = ((sent + i) % 251) as u8;
            }
            if sent == 0 {
                piece[..PNG.len()].copy_from_slice(PNG);
            }
            hashing.lock().unwrap().update(&piece);
            sent += n;
            yield Ok(bytes::Bytes::from(piece));
        }
        yield Ok(bytes::Bytes::from(tail));
    };
    (reqwest::Body::wrap_stream(stream), total, hash, release)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_100_mb_file_streams_through_a_serve_process_in_bounded_memory() {
    let moto = Moto::start().await;
    for s3 in [false, true] {
        let db = TestDb::new().await;
        let mut vars = with(DEV, &[]);
        if s3 {
            vars.extend(moto.vars());
        }
        let server = ServeProcess::start(&db, &borrowed(&vars));
        support::harness::wait_for_status(&server.url("/ready"), 200).await;
        serve_endpoint(
            &server,
            &db,
            "big",
            json!({ "maxFileBytes": 150_000_000, "maxTotalBytes": 150_000_000 }),
        )
        .await;
        let pid = server.child.id();
        let (baseline, _) = memory_kb(pid);

        const SIZE: usize = 100_000_000;
        let (body, total, hash, _release) = streamed_upload(SIZE, None);
        let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = {
            let sampling = sampling.clone();
            tokio::spawn(async move {
                let mut peak = 0;
                while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(memory_kb(pid).0);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                peak
            })
        };
        let response = reqwest::Client::new()
            .post(server.url("/f/big"))
            .header("content-type", content_type())
            .header("content-length", total)
            .body(body)
            .send()
            .await
            .unwrap();
        sampling.store(false, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.await.unwrap();
        let status = response.status();
        let receipt: Value = response.json().await.unwrap();
        assert_eq!(status, 202, "{receipt}");
        let (_, high_water) = memory_kb(pid);
        let growth_mb = (peak.max(high_water).saturating_sub(baseline)) / 1024;
        eprintln!(
            "serve RSS ({}): baseline {} MB, peak sampled {} MB, VmHWM {} MB",
            if s3 { "S3" } else { "PostgreSQL" },
            baseline / 1024,
            peak / 1024,
            high_water / 1024
        );
        // The file never is in memory whole: the growth is the buffers of one upload
        // (a 256 KiB row, or a few 5 MiB parts in flight to S3), far below 100 MB.
        assert!(
            growth_mb < 40,
            "a 100 MB upload grew the server by {growth_mb} MB (baseline {baseline} kB, peak {peak} kB, VmHWM {high_water} kB)"
        );
        let expected = hex::encode(hash.lock().unwrap().clone().finalize());
        let stored = db
            .count(&format!(
                "SELECT count(*) AS n FROM submission_files WHERE sha256 = '{expected}' AND size_bytes = {SIZE} AND submission_id IS NOT NULL"
            ))
            .await;
        assert_eq!(stored, 1);
        if s3 {
            assert_eq!(moto.objects().await.len(), 1);
        }
        server.stop();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_serve_process_killed_mid_upload_leaves_no_row_or_object_after_its_sweep() {
    let moto = Moto::start().await;
    for s3 in [false, true] {
        let db = TestDb::new().await;
        let mut vars = with(
            DEV,
            &[
                (
                    "FORMS_FILE_UPLOAD_TIMEOUT_SECONDS".to_string(),
                    "10".to_string(),
                ),
                (
                    "FORMS_FILE_SWEEP_GRACE_SECONDS".to_string(),
                    "11".to_string(),
                ),
            ],
        );
        if s3 {
            vars.extend(moto.vars());
        }
        let server = ServeProcess::start(&db, &borrowed(&vars));
        support::harness::wait_for_status(&server.url("/ready"), 200).await;
        serve_endpoint(
            &server,
            &db,
            "crash",
            json!({ "maxFileBytes": 100_000_000, "maxTotalBytes": 100_000_000 }),
        )
        .await;
        // 12 MiB sent (two parts of an object upload, 48 chunk rows), then it waits.
        let (body, total, _hash, release) = streamed_upload(50_000_000, Some(12 << 20));
        let url = server.url("/f/crash");
        let upload = tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .header("content-type", content_type())
                .header("content-length", total)
                .body(body)
                .send()
                .await
        });
        eventually("the upload's row and bytes stored", || async {
            let (rows, chunks) = file_rows(&db).await;
            rows == 1 && (s3 || chunks >= 40)
        })
        .await;
        server.kill();
        drop(release);
        // The connection died with the process: whatever the client saw, no answer.
        let _ = upload.await.unwrap();
        assert_eq!(file_rows(&db).await.0, 1, "the crash left its row behind");

        // Restarted after the grace: the workers' pruning sweeps at start.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let restarted = ServeProcess::start(&db, &borrowed(&vars));
        support::harness::wait_for_status(&restarted.url("/ready"), 200).await;
        eventually("the sweeper removed the abandoned upload", || async {
            file_rows(&db).await == (0, 0)
        })
        .await;
        assert_eq!(moto.objects().await, Vec::<String>::new());
        assert_eq!(db.count("SELECT count(*) AS n FROM submissions").await, 0);
        restarted.stop();
    }
}

// --- A plain HTML form with a file input, in headless Chromium; the console's files. ---

#[tokio::test(flavor = "multi_thread")]
async fn chromium_submits_a_multipart_form_with_a_file() {
    use fantoccini::Locator;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "browser", None, json!({})).await;

    // The page, served by a tiny loopback server of the test.
    let page = format!(
        "<!DOCTYPE html><html><body><form id=\"f\" enctype=\"multipart/form-data\" method=\"post\" action=\"http://127.0.0.1:{}/f/browser\">\
         <input name=\"email\" value=\"ada@example.org\"><input type=\"file\" name=\"attachment\">\
         <button type=\"submit\">Send</button></form></body></html>",
        app.addr.port()
    );
    let site = axum::Router::new().route(
        "/form.html",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, site).await });

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    let contents = "Files from a browser ✓\n".repeat(100);
    std::fs::write(&file, &contents).unwrap();

    let driver = support::browser::start_driver().await;
    let client = support::browser::browser(&driver).await;
    client
        .goto(&format!("http://{site_addr}/form.html"))
        .await
        .unwrap();
    let input = client.find(Locator::Css("input[type=file]")).await.unwrap();
    input.send_keys(file.to_str().unwrap()).await.unwrap();
    client
        .find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually("the browser's submission stored", || async {
        app.stored_counts().await.0 == 1
    })
    .await;
    let text = client.source().await.unwrap();
    assert!(text.contains("submission_id"), "{text}");

    // The console lists the submission's file, and its link downloads the bytes.
    let submission_id = text
        .split("\"submission_id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    support::browser::sign_in(&client, &app.url("/"), &key).await;
    client
        .goto(&app.url(&format!("/#/submissions/{submission_id}")))
        .await
        .unwrap();
    let row = support::browser::wait_for_text(&client, "#submission-files", "notes.txt").await;
    assert!(row.contains("text/plain"), "{row}");
    assert!(row.contains(&sha256_hex(contents.as_bytes())), "{row}");
    let href = client
        .find(Locator::Css("#submission-files a"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    assert!(href.starts_with("/files/fil_"), "{href}");
    let download = app.http.get(app.url(&href)).send().await.unwrap();
    assert_eq!(download.status(), 200);
    assert_eq!(download.text().await.unwrap(), contents);
    client.close().await.unwrap();

    let submission = app
        .db
        .count("SELECT count(*) AS n FROM submissions WHERE fields::text LIKE '%ada@example.org%'")
        .await;
    assert_eq!(submission, 1);
    let stored = app
        .db
        .count(&format!(
            "SELECT count(*) AS n FROM submission_files WHERE name = 'notes.txt' AND content_type = 'text/plain' AND sha256 = '{}' AND submission_id IS NOT NULL",
            sha256_hex(contents.as_bytes())
        ))
        .await;
    assert_eq!(stored, 1);
}

// --- Retention and erasing an endpoint remove the bytes, objects included. ---

#[tokio::test(flavor = "multi_thread")]
async fn retention_and_endpoint_erase_remove_files_and_objects() {
    let moto = Moto::start().await;
    let vars = with(DEV, &moto.vars());
    let app = TestApp::start_with(&borrowed(&vars), Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "old-forms", None, json!({})).await;
    create_endpoint(&app, &key, "erased", None, json!({})).await;
    for endpoint in ["old-forms", "old-forms", "erased"] {
        let (status, answer) = post(
            &app,
            endpoint,
            multipart(&[Part::File("cv", "cv.png", PNG)]),
        )
        .await;
        assert_eq!(status, 202, "{answer}");
    }
    assert_eq!(moto.objects().await.len(), 3);

    // One of the old endpoint's submissions is 60 days old: the retention command takes
    // it, its row and its object.
    app.db
        .count(
            "WITH aged AS (UPDATE submissions SET received_at = now() - interval '60 days' \
             WHERE id = (SELECT min(id) FROM submissions WHERE endpoint_id = 'old-forms') \
             RETURNING 1) SELECT count(*) AS n FROM aged",
        )
        .await;
    let dir = tempfile::tempdir().unwrap();
    let mut command = support::harness::forms_command(dir.path());
    command
        .env("FORMS_DATABASE_URL", app.db.url.expose())
        .args(["retention", "--older-than-days", "30"]);
    for (name, value) in moto.vars() {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("deleted 1 "), "{stdout}");
    assert!(stdout.contains("removed 1 uploaded file(s)"), "{stdout}");
    assert_eq!(moto.objects().await.len(), 2);
    assert_eq!(file_rows(&app.db).await.0, 2);

    // Erasing an endpoint with its history removes its files' bytes at once.
    data(
        app.gql(
            &key,
            "mutation { deleteEndpoint(input: { id: \"erased\", history: ERASE }) { deletedEndpointId } }",
            json!({}),
        )
        .await,
    );
    let objects = moto.objects().await;
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert!(objects[0].starts_with("files/old-forms/"), "{objects:?}");
    assert_eq!(file_rows(&app.db).await, (1, 0));
}

/// An upload's window of memory counts against the bodies held at once: a server whose
/// budget has no room for one refuses it before reading a byte, and stores nothing.
#[tokio::test(flavor = "multi_thread")]
async fn uploads_count_against_the_buffered_bodies_budget() {
    let vars = with(
        DEV,
        &[
            ("FORMS_MAX_BODY_BYTES".to_string(), "1000".to_string()),
            (
                "FORMS_HTTP_MAX_BUFFERED_BODY_BYTES".to_string(),
                "1048576".to_string(),
            ),
        ],
    );
    let app = TestApp::start_with(&borrowed(&vars), Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "tight", None, json!({})).await;
    let response = app
        .post_form(
            "tight",
            Some(&content_type()),
            multipart(&[Part::File("cv", "cv.png", PNG)]),
            &[],
        )
        .await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "server_busy");
    assert_eq!(file_rows(&app.db).await, (0, 0));
    assert_eq!(app.stored_counts().await.0, 0);
}

/// The idempotency fingerprint covers the files: the same key with the same file is the
/// original receipt (the repeat's copy removed), with another file a conflict.
#[tokio::test(flavor = "multi_thread")]
async fn an_idempotency_key_covers_the_files() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "keyed", None, json!({})).await;
    let send = |bytes: Vec<u8>| {
        let app = &app;
        async move {
            let response = app
                .post_form(
                    "keyed",
                    Some(&content_type()),
                    multipart(&[Part::Text("a", "1"), Part::File("cv", "cv.txt", &bytes)]),
                    &[("idempotency-key", "files-key-0123456789")],
                )
                .await;
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, first) = send(b"first file\n".to_vec()).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = send(b"first file\n".to_vec()).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["idempotent_replay"], true);
    assert_eq!(again["submission_id"], first["submission_id"]);
    let (status, other) = send(b"another file\n".to_vec()).await;
    assert_eq!(status, 409, "{other}");
    assert_eq!(other["error"]["code"], "idempotency_conflict");
    assert_eq!(app.stored_counts().await.0, 1);
    assert_eq!(
        file_rows(&app.db).await.0,
        1,
        "the repeats' files are removed"
    );
}

/// Sends a request head declaring `declared` bytes and then `sent` over a raw connection,
/// and keeps the connection open without sending the rest: answers the status line and
/// body the server sent back, or panics when none came within 60 s (the server would only
/// answer at the upload timeout, set far beyond that, if it waited for the rest).
async fn send_part_and_hold(
    addr: std::net::SocketAddr,
    endpoint: &str,
    sent: &[u8],
    declared: usize,
) -> (String, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /f/{endpoint} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {}\r\nContent-Length: {declared}\r\n\r\n",
        content_type()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(sent).await.unwrap();
    stream.flush().await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        loop {
            let n = stream.read(&mut buffer).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&answer);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| {
                        line.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("an answer while the rest of the body is still owed");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole answer");
    let status = head.lines().next().unwrap_or_default().to_string();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Many empty parts are refused at the first past `FORMS_MAX_FIELDS`, as soon as it
/// arrives: the client sends that many parts of a body it declares far longer and sends
/// no more, and still gets its answer. Text parts and file inputs left empty (which
/// store nothing) count alike.
#[tokio::test(flavor = "multi_thread")]
async fn many_empty_parts_are_refused_at_the_first_part_past_the_field_limit() {
    let vars = with(
        DEV,
        &[
            ("FORMS_MAX_FIELDS".to_string(), "5".to_string()),
            (
                "FORMS_FILE_UPLOAD_TIMEOUT_SECONDS".to_string(),
                "3000".to_string(),
            ),
            (
                "FORMS_FILE_SWEEP_GRACE_SECONDS".to_string(),
                "3600".to_string(),
            ),
        ],
    );
    let app = TestApp::start_with(&borrowed(&vars), Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "flood", None, json!({})).await;
    let text = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n\r\n");
    let empty_file = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"cv\"; filename=\"\"\r\nContent-Type: application/octet-stream\r\n\r\n\r\n"
    );
    for part in [&text, &empty_file] {
        // Six parts and the start of a seventh boundary, of a body declared 20 MB.
        let sent = format!("{}--{BOUNDARY}\r\n", part.repeat(6));
        let (status, answer) =
            send_part_and_hold(app.addr, "flood", sent.as_bytes(), 20 << 20).await;
        assert!(status.contains(" 422 "), "{status}: {answer}");
        assert_eq!(answer["error"]["code"], "too_many_fields", "{answer}");
        assert_eq!(
            answer["error"]["details"],
            json!({"limit": 5, "received": 6})
        );
    }
    // Five are still a submission.
    let body = multipart(&[
        Part::Text("a", "1"),
        Part::Text("a", "2"),
        Part::Text("a", "3"),
        Part::Text("a", "4"),
        Part::File("cv", "cv.png", PNG),
        Part::Text("a", "5"),
    ]);
    let (status, receipt) = post(&app, "flood", body).await;
    assert_eq!(status, 202, "{receipt}");
    assert_eq!(app.stored_counts().await.0, 1);
}

/// Each part's headers and name count against `FORMS_MAX_BODY_BYTES` with the text
/// values, also on an endpoint that takes files (whose body may be far longer): text
/// parts with empty values but long headers are refused, and nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn part_headers_and_names_count_against_the_text_allowance() {
    let vars = with(
        DEV,
        &[("FORMS_MAX_BODY_BYTES".to_string(), "2000".to_string())],
    );
    let app = TestApp::start_with(&borrowed(&vars), Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "padded", None, json!({})).await;
    let padded = |name: &str| {
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\nX-Padding: {}\r\n\r\n\r\n",
            "p".repeat(900)
        )
    };
    let body = format!(
        "{}{}{}--{BOUNDARY}--\r\n",
        padded("a"),
        padded("b"),
        padded("c")
    );
    let (status, answer) = post(&app, "padded", body.into_bytes()).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["code"], "request_body_too_large");
    assert_eq!(answer["error"]["details"], json!({"limit_bytes": 2000}));
    // A name as long as the allowance, in a part of no value, is refused as well.
    let body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{}\"\r\n\r\n\r\n--{BOUNDARY}--\r\n",
        "n".repeat(2000)
    );
    let (status, answer) = post(&app, "padded", body.into_bytes()).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(app.stored_counts().await.0, 0);
    assert_eq!(file_rows(&app.db).await, (0, 0));
}

/// A file's name must agree with the type judged from its content: an SVG without an XML
/// declaration is text, and is not kept as `x.svg` (nor as `x.svg.`, which Windows saves
/// as `x.svg`). Refused with `422 file_name_not_allowed`; nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn a_name_that_disagrees_with_the_content_is_refused() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "named", None, json!({})).await;
    let svg: &[u8] =
        b"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\"><script>alert(2)</script></svg>";
    for (file_name, bytes, detected) in [
        ("x.svg", svg, "text/plain"),
        ("X.SVG", svg, "text/plain"),
        ("x.svg.", svg, "text/plain"),
        (
            "x.js",
            b"document.cookie = 'x=1';\n".as_slice(),
            "text/plain",
        ),
        ("cat.jpg", PNG, "image/png"),
    ] {
        let body = multipart(&[Part::Text("a", "1"), Part::File("cv", file_name, bytes)]);
        let (status, answer) = post(&app, "named", body).await;
        assert_eq!(status, 422, "{file_name}: {answer}");
        assert_eq!(answer["error"]["code"], "file_name_not_allowed", "{answer}");
        assert_eq!(
            answer["error"]["details"],
            json!({"field": "cv", "detected": detected}),
            "{file_name}"
        );
    }
    assert_eq!(app.stored_counts().await.0, 0);
    assert_eq!(file_rows(&app.db).await, (0, 0));
    // The same content under a name that says what it is is taken.
    let body = multipart(&[
        Part::File("cv", "x.txt", svg),
        Part::File("pic", "cat", PNG),
    ]);
    let (status, answer) = post(&app, "named", body).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(file_rows(&app.db).await.0, 2);
}

/// Bidirectional controls (U+202E after `invoice` makes `invoicefdp.txt` read
/// `invoicetxt.pdf`) and
/// other invisible characters are removed from a file's name before it is judged and
/// stored.
#[tokio::test(flavor = "multi_thread")]
async fn bidi_controls_and_invisible_characters_are_removed_from_file_names() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("files").await;
    create_endpoint(&app, &key, "bidi", None, json!({})).await;
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"cv\"; filename*=UTF-8''invoice%E2%80%AEfdp%E2%80%8B%E2%81%A6.txt\r\n\r\nplain text\r\n--{BOUNDARY}--\r\n"
        )
        .as_bytes(),
    );
    let (status, receipt) = post(&app, "bidi", body).await;
    assert_eq!(status, 202, "{receipt}");
    let name: String = {
        use diesel::QueryableByName;
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            name: String,
        }
        let mut conn = app.db.connect().await;
        let rows: Vec<Row> = diesel_async::RunQueryDsl::load(
            diesel::sql_query("SELECT name FROM submission_files"),
            &mut conn,
        )
        .await
        .unwrap();
        rows.into_iter().next().unwrap().name
    };
    assert_eq!(name, "invoicefdp.txt");
    assert!(!name.chars().any(|c| ('\u{2000}'..='\u{206f}').contains(&c)));
}

/// A link handed to an API key (`Submission.files.downloadUrl`) stops working once that
/// key is revoked, well before its seven days; links handed to other keys, and the
/// webhook's, go on. The key cannot be taken off the link.
#[tokio::test(flavor = "multi_thread")]
async fn a_link_handed_to_a_key_stops_working_when_the_key_is_revoked() {
    use hymical_forms::testing::model::ids::KeyId;
    use hymical_forms::testing::model::state::KeyRole;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, admin) = app.create_key("files").await;
    let (reader_id, reader) = app.create_key_with_role("dashboard", KeyRole::Read).await;
    create_endpoint(&app, &admin, "revocable", None, json!({})).await;
    let body = multipart(&[Part::File("cv", "cv.png", PNG)]);
    let (status, receipt) = post(&app, "revocable", body).await;
    assert_eq!(status, 202, "{receipt}");
    let submission = receipt["submission_id"].as_str().unwrap().to_string();
    let link = |key: String| {
        let app = &app;
        let submission = submission.clone();
        async move {
            let answer = data(
                app.gql(
                    &key,
                    "query($id: ID!) { submission(id: $id) { files { downloadUrl } } }",
                    json!({ "id": submission }),
                )
                .await,
            );
            link_parts(
                answer["submission"]["files"][0]["downloadUrl"]
                    .as_str()
                    .unwrap(),
            )
            .0
        }
    };
    let read_link = link(reader.clone()).await;
    let admin_link = link(admin.clone()).await;
    assert!(
        read_link.contains(&format!("&key={reader_id}&")),
        "{read_link}"
    );
    let status = |path: String| download(&app, path);
    assert_eq!(status(read_link.clone()).await.0, 200);
    // Without its key the link is not this server's.
    let (path, query) = read_link.split_once('?').unwrap();
    let stripped: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.starts_with("key="))
        .collect();
    let (code, answer) = status(format!("{path}?{}", stripped.join("&"))).await;
    assert_eq!(code, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "file_link_invalid");

    let mut conn = app.db.connect().await;
    hymical_forms::testing::db::keys::revoke(
        &mut conn,
        &KeyId::parse(&reader_id).unwrap(),
        Utc::now(),
    )
    .await
    .unwrap();
    let (code, answer) = status(read_link).await;
    assert_eq!(code, 410, "{answer}");
    assert_eq!(answer["error"]["code"], "file_link_expired");
    assert_eq!(
        status(admin_link).await.0,
        200,
        "another key's link goes on"
    );
}

/// A file of one project is no other project's: another project's key finds no
/// submission to take a link from, a link made for one key does not work with another
/// key's id put in, and a link handed to a project's key ends with the project.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_link_is_only_ever_its_own_projects() {
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let (_, root) = app.create_key("installation").await;
    let mut keys = Vec::new();
    for name in ["A", "B"] {
        let project = data(
            app.gql(
                &root,
                &format!(r#"mutation {{ createProject(name: "{name}") {{ id }} }}"#),
                json!({}),
            )
            .await,
        )["createProject"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let made = data(
            app.gql(
                &root,
                "mutation($p: ID!) { createApiKey(input: { name: \"team\", role: ADMIN, projectId: $p }) { key apiKey { id } } }",
                json!({ "p": project }),
            )
            .await,
        );
        keys.push((
            project,
            made["createApiKey"]["key"].as_str().unwrap().to_string(),
            made["createApiKey"]["apiKey"]["id"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    let [(project_a, key_a, _), (_, key_b, key_b_id)] = [keys[0].clone(), keys[1].clone()];
    create_endpoint(&app, &key_a, "upload-a", None, json!({})).await;
    let (status, receipt) = post(
        &app,
        "upload-a",
        multipart(&[Part::File("cv", "cv.png", PNG)]),
    )
    .await;
    assert_eq!(status, 202, "{receipt}");
    let submission = receipt["submission_id"].as_str().unwrap().to_string();
    let files = "query($id: ID!) { submission(id: $id) { files { downloadUrl } } }";
    let seen_by_b = data(app.gql(&key_b, files, json!({ "id": submission })).await);
    assert_eq!(seen_by_b["submission"], Value::Null);
    let answer = data(app.gql(&key_a, files, json!({ "id": submission })).await);
    let link = link_parts(
        answer["submission"]["files"][0]["downloadUrl"]
            .as_str()
            .unwrap(),
    )
    .0;
    let get = |path: String| download(&app, path);
    assert_eq!(get(link.clone()).await.0, 200);
    // B's key id put in A's link: not a link this server made.
    let key_a_id = link
        .split("key=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap()
        .to_string();
    let (code, answer) = get(link.replace(&key_a_id, &key_b_id)).await;
    assert_eq!(code, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "file_link_invalid");
    // Project A deleted (after its endpoint): the link handed to A's key ends with it.
    data(app.gql(&key_a, r#"mutation { deleteEndpoint(input: { id: "upload-a", history: KEEP }) { deletedEndpointId } }"#, json!({})).await);
    let refused = app
        .gql(
            &root,
            "mutation($p: ID!) { deleteProject(id: $p) { id } }",
            json!({ "p": project_a }),
        )
        .await;
    assert!(refused.get("errors").is_none(), "{refused}");
    let (code, answer) = get(link).await;
    assert_eq!(code, 410, "{answer}");
}

/// GETs a file link's path: the status, and the error body (`null` for the file's bytes).
async fn download(app: &TestApp, path: String) -> (u16, Value) {
    let response = app.http.get(app.url(&path)).send().await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.json::<Value>().await.unwrap_or(Value::Null),
    )
}
