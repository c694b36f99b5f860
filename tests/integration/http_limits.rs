//! Bounded clients: header, body and idle timeouts, the connection cap, and a shutdown
//! that completes whatever clients hold open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hymical_forms::testing::clock::SystemClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::harness::{wait_for_status, ServeProcess, TestApp, TestDb};

const LIMITS: &[(&str, &str)] = &[
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "1"),
    ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "0.5"),
    ("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", "1"),
];

/// How long until the server closes `stream` (reads return end of file or an error),
/// reading and dropping whatever it sends; at most `limit`.
pub async fn closed_after(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    loop {
        let remaining = limit.checked_sub(started.elapsed())?;
        match tokio::time::timeout(remaining, stream.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_headers_are_cut_off_at_the_header_timeout() {
    let app = TestApp::start_with(LIMITS, Arc::new(SystemClock)).await;
    let mut connections = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        stream
            .write_all(b"POST /f/contact HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        connections.push(stream);
    }
    // Keep trickling a byte now and then, as slowloris does.
    let started = Instant::now();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for stream in &mut connections {
            let _ = stream.write_all(b"a").await;
        }
    }
    for stream in &mut connections {
        let closed = closed_after(stream, Duration::from_secs(5)).await;
        assert!(closed.is_some(), "a slow-header connection stayed open");
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_are_closed_and_a_trickled_body_times_out() {
    let app = TestApp::start_with(LIMITS, Arc::new(SystemClock)).await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;

    // A connection that never sends anything, and one kept alive after a request.
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    let mut kept = TcpStream::connect(app.addr).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 64];
    let read = kept.read(&mut first).await.unwrap();
    assert!(first[..read].starts_with(b"HTTP/1.1 200"));
    for stream in [&mut silent, &mut kept] {
        let closed = closed_after(stream, Duration::from_secs(5))
            .await
            .expect("an idle connection stayed open");
        assert!(closed < Duration::from_secs(2), "{closed:?}");
    }

    // Headers complete, then a body of one byte every 300 ms: refused at the body deadline.
    let mut trickle = TcpStream::connect(app.addr).await.unwrap();
    trickle
        .write_all(
            b"POST /f/contact HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\na=",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while started.elapsed() < Duration::from_secs(5) {
        let _ = trickle.write_all(b"x").await;
        match tokio::time::timeout(Duration::from_millis(300), trickle.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(read)) => {
                answer.extend_from_slice(&buffer[..read]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                    break;
                }
            }
            Err(_) => {}
        }
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains(r#""code":"request_timeout""#), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(app.stored_counts().await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn beyond_the_connection_cap_new_connections_wait_for_a_free_one() {
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_HTTP_MAX_CONNECTIONS", "4"),
        ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "30"),
        ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "30"),
    ];
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(app.addr).await.unwrap());
    }
    // The kernel takes the fifth connection into the backlog; the server does not serve
    // it while four are open.
    let mut fifth = TcpStream::connect(app.addr).await.unwrap();
    fifth
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 256];
    assert!(
        tokio::time::timeout(Duration::from_millis(500), fifth.read(&mut buffer))
            .await
            .is_err(),
        "served beyond the cap"
    );
    drop(held.pop());
    let read = tokio::time::timeout(Duration::from_secs(5), fifth.read(&mut buffer))
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_completes_with_a_half_sent_request_open() {
    let db = TestDb::new().await;
    let server = ServeProcess::start(
        &db,
        &[
            ("FORMS_WORKER_ENABLED", "false"),
            // Long enough that only the shutdown deadline can end the request.
            ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "120"),
            ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "120"),
            ("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", "120"),
            ("FORMS_SHUTDOWN_TIMEOUT_SECONDS", "2"),
        ],
    );
    wait_for_status(&server.url("/health"), 200).await;
    let mut half = TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    half.write_all(b"POST /f/contact HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\na=")
        .await
        .unwrap();
    let mut head_only = TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    head_only
        .write_all(b"GET /health HTTP/1.1\r\nHo")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, log) =
        tokio::task::spawn_blocking(move || server.stop_within(Duration::from_secs(10)))
            .await
            .unwrap();
    let status = status.unwrap_or_else(|| panic!("SIGTERM did not complete: {log}"));
    assert!(status.success(), "{log}");
}

/// A client that speaks HTTP/2 (prior knowledge, as `curl --http2-prior-knowledge` does),
/// answers the server's pings and sends its own, but never makes a request: it is idle,
/// whatever frames it sends, and is closed after the keep-alive timeout. With three such
/// clients holding a three-connection server, `/health` is still answered once they go.
#[tokio::test(flavor = "multi_thread")]
async fn idle_http2_connections_are_closed_whatever_frames_they_send() {
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_HTTP_MAX_CONNECTIONS", "3"),
        ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "1"),
        ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "0.5"),
    ];
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    let mut idlers = Vec::new();
    for _ in 0..3 {
        let stream = TcpStream::connect(app.addr).await.unwrap();
        let (_send, mut connection) = h2::client::handshake(stream).await.expect("h2");
        let mut pinger = connection.ping_pong().expect("ping_pong");
        idlers.push(tokio::spawn(async move {
            // The connection answers the server's pings while it is driven; a ping of our
            // own every 100 ms is traffic a byte-counting idle check would take for life.
            let pings = async {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if pinger.ping(h2::Ping::opaque()).await.is_err() {
                        return;
                    }
                }
            };
            let started = Instant::now();
            tokio::select! {
                _ = connection => {}
                _ = pings => {}
                _ = tokio::time::sleep(Duration::from_secs(30)) => return None,
            }
            Some(started.elapsed())
        }));
    }
    // Behind the three, a plain request waits in the backlog, then is answered.
    let health = tokio::time::timeout(Duration::from_secs(20), async {
        app.http.get(app.url("/health")).send().await
    })
    .await
    .expect("/health answered once the idle clients were closed")
    .expect("request");
    assert_eq!(health.status(), 200);
    for idler in idlers {
        idler
            .await
            .unwrap()
            .expect("an idle HTTP/2 connection stayed open");
    }
}

/// HTTP/2 requests are served as before: a connection that makes requests stays open
/// between them while within the keep-alive timeout.
#[tokio::test(flavor = "multi_thread")]
async fn http2_requests_are_served() {
    let app = TestApp::start_with(LIMITS, Arc::new(SystemClock)).await;
    let stream = TcpStream::connect(app.addr).await.unwrap();
    let (mut send, connection) = h2::client::handshake(stream).await.expect("h2");
    tokio::spawn(connection);
    for _ in 0..3 {
        let request = axum::http::Request::get(format!("http://{}/health", app.addr))
            .body(())
            .unwrap();
        let (response, _) = send.send_request(request, true).expect("send");
        assert_eq!(response.await.expect("response").status(), 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
        send = send.ready().await.expect("the connection is still open");
    }
}

/// One client address holds at most `FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS` connections;
/// one more from it is closed at once, while another address is served.
#[tokio::test(flavor = "multi_thread")]
async fn one_address_holds_at_most_its_share_of_connections() {
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS", "2"),
        ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "30"),
        ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "30"),
    ];
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    let from = |address: &str| {
        let address: std::net::IpAddr = address.parse().unwrap();
        let target = app.addr;
        async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(std::net::SocketAddr::new(address, 0)).unwrap();
            socket.connect(target).await.unwrap()
        }
    };
    let _held = [from("127.0.0.1").await, from("127.0.0.1").await];
    let mut third = from("127.0.0.1").await;
    let _ = third
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    assert!(
        closed_after(&mut third, Duration::from_secs(5))
            .await
            .is_some(),
        "a third connection from one address was kept"
    );
    let mut other = from("127.0.0.2").await;
    other
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), other.read_to_end(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}

/// Bodies held at once are bounded all requests together: while one client holds most of
/// `FORMS_HTTP_MAX_BUFFERED_BODY_BYTES` in a body it has not finished, another body that
/// would pass the bound is refused with 503 and `Retry-After`, nothing stored; once the
/// first is done, room is back.
#[tokio::test(flavor = "multi_thread")]
async fn bodies_buffered_at_once_are_bounded() {
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_MAX_BODY_BYTES", "200000"),
        ("FORMS_HTTP_MAX_BUFFERED_BODY_BYTES", "250000"),
        ("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", "30"),
    ];
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;
    // Ten fields of 15,000 characters: each within the field limit, 150 KB in all.
    let value: String = (0..10)
        .map(|i| format!("f{i}={}", "x".repeat(15_000)))
        .collect::<Vec<_>>()
        .join("&");
    let declared = value.len();
    let mut holder = TcpStream::connect(app.addr).await.unwrap();
    holder
        .write_all(
            format!(
                "POST /f/contact HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {declared}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // All but the last byte, held by the server.
    let body = value.clone();
    holder
        .write_all(&body.as_bytes()[..declared - 1])
        .await
        .unwrap();
    let budget = app.app.body_budget.clone();
    for _ in 0..500 {
        if budget.available() <= 250_000 - (declared - 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(budget.available(), 250_000 - (declared - 1));
    let refused = app
        .post_form(
            "contact",
            Some("application/x-www-form-urlencoded"),
            value.clone(),
            &[],
        )
        .await;
    assert_eq!(refused.status(), 503);
    assert_eq!(
        refused.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let answer: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "server_busy", "{answer}");
    holder
        .write_all(&body.as_bytes()[declared - 1..])
        .await
        .unwrap();
    let mut head = [0u8; 16];
    holder.read_exact(&mut head).await.unwrap();
    assert!(head.starts_with(b"HTTP/1.1 202"), "{head:?}");
    assert_eq!(app.stored_counts().await.0, 1);
    let accepted = app
        .post_form(
            "contact",
            Some("application/x-www-form-urlencoded"),
            value.clone(),
            &[],
        )
        .await;
    assert_eq!(accepted.status(), 202);
    assert_eq!(budget.available(), 250_000);
}
