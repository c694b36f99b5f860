//! Bounded clients: header, body and idle timeouts, the connection cap, and a shutdown
//! that completes whatever clients hold open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hymical_forms::testing::clock::SystemClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{wait_for_status, ServeProcess, TestApp, TestDb};

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
    app.insert_endpoint(&crate::harness::endpoint("contact"))
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
