//! Bounded database calls: a network to PostgreSQL that silently stops delivering, and
//! exports whose clients never read, cannot hold requests or the shared pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{TestApp, TestDb};
use crate::proxy::Proxy;

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_network_to_the_database_answers_every_request_within_its_deadline() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(db.server_addr()).await;
    let url = db.url_through(proxy.addr);
    let vars = [
        ("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", "1"),
        ("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "1"),
    ];
    let app = TestApp::start_on_url(db, &url, &vars, Arc::new(SystemClock), None).await;
    app.insert_endpoint(&crate::harness::endpoint("contact"))
        .await;
    let (_, key) = app.create_key("ops").await;
    let post = || async {
        let started = Instant::now();
        let response = app
            .post_form(
                "contact",
                Some("application/x-www-form-urlencoded"),
                "a=1",
                &[],
            )
            .await;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        (status, body, started.elapsed())
    };
    assert_eq!(post().await.0, 202);

    proxy.set_blackhole(true);
    // Statement timeout 1 s: the call deadline is 3 s. Each request answers by then,
    // whether its connection was open already or has to be opened.
    let deadline = Duration::from_secs(6);
    for _ in 0..2 {
        let (status, body, took) = post().await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "storage_unavailable");
        assert!(took < deadline, "intake took {took:?}");
        let started = Instant::now();
        let ready = app.http.get(app.url("/ready")).send().await.unwrap();
        assert_eq!(ready.status(), 503);
        assert!(started.elapsed() < deadline);
        let started = Instant::now();
        let (status, _) = app
            .graphql(Some(&format!("Bearer {key}")), "{ version }")
            .await;
        assert_eq!(status, 503);
        assert!(started.elapsed() < deadline);
    }
    // Once the network delivers again, so does the service, without a restart.
    proxy.set_blackhole(false);
    let recovered = Instant::now();
    loop {
        let (status, _, _) = post().await;
        if status == 202 {
            break;
        }
        assert!(
            recovered.elapsed() < Duration::from_secs(20),
            "no recovery after the network came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing was stored while the database could not be reached.
    let (submissions, _) = app.stored_counts().await;
    assert_eq!(submissions, 2);
}

/// Opens an export on a socket with a tiny receive buffer that reads only the status
/// line, then stops reading: a client that never takes the body.
async fn stalled_export(app: &TestApp, key: &str) -> (tokio::net::TcpStream, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(app.addr).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /submissions/export?format=json HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).await.unwrap();
    (stream, String::from_utf8_lossy(&status).into_owned())
}

async fn exports_in_transaction(app: &TestApp) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = app.db.connect().await;
    let count: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM pg_stat_activity
         WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    )
    .get_result(&mut conn)
    .await
    .unwrap();
    count.n
}

#[tokio::test(flavor = "multi_thread")]
async fn exports_whose_clients_never_read_cannot_take_the_pool() {
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_EXPORT_MAX_CONCURRENT", "2"),
        ("FORMS_HTTP_SEND_TIMEOUT_SECONDS", "1"),
        ("FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "5"),
        ("FORMS_EXPORT_MAX_SUBMISSIONS", "100000"),
    ];
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    app.insert_endpoint(&crate::harness::endpoint("contact"))
        .await;
    let (_, key) = app.create_key("ops").await;
    // About 12 MB of submissions in 40 pages: far more than the response channel and the
    // socket buffers hold, so a client that stops reading stops the export.
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "INSERT INTO submissions (id, endpoint_id, received_at, fields)
         SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'contact', now() - n * interval '1 ms',
                json_build_object('note', json_build_array(repeat('x', 500)))
         FROM generate_series(1, 20000) AS n",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    // Four exports whose clients stop reading: as many as the test pool has connections.
    let mut held = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (stream, status) = stalled_export(&app, &key).await;
        statuses.push(status);
        held.push(stream);
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [
            "HTTP/1.1 200",
            "HTTP/1.1 200",
            "HTTP/1.1 429",
            "HTTP/1.1 429"
        ]
    );
    // Intake is untouched: the exports have connections of their own.
    for _ in 0..10 {
        let started = Instant::now();
        let response = app
            .post_form(
                "contact",
                Some("application/x-www-form-urlencoded"),
                "a=1",
                &[],
            )
            .await;
        assert_eq!(response.status(), 202);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    // After the send timeout the stalled exports end: their transactions close.
    let started = Instant::now();
    while exports_in_transaction(&app).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "stalled exports kept their transactions"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(held);
    // And an export that is read works again.
    let response = app
        .http
        .get(app.url("/submissions/export?format=json"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["submissions"].as_array().unwrap().len(), 20_010);
}
