//! Hostile clients against a real server process: slowloris connections (slow heads,
//! slow bodies) are closed within the configured timeouts, and ten thousand idle
//! connections leave intake for everyone else at its normal latency.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::probe;
use support::harness::{endpoint, wait_for_status, ServeProcess, TestDb};

/// Latencies of `count` sequential form posts, sorted.
async fn intake_latencies(url: &str, count: usize) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let mut latencies = Vec::with_capacity(count);
    for n in 0..count {
        let started = Instant::now();
        let response = support::harness::post_urlencoded(&client, url, format!("n={n}"))
            .await
            .expect("post");
        assert_eq!(response.status(), 202);
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A healthy server for intake alone (no rate limit, no worker) with the endpoint
/// "contact", and `timeouts` besides; answers its database too, which must outlive it.
async fn intake_server(timeouts: &[(&str, &str)]) -> (TestDb, ServeProcess) {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    hymical_forms::testing::db::endpoints::insert(&mut conn, &endpoint("contact"), None)
        .await
        .expect("endpoint");
    let vars = [
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_WORKER_ENABLED", "false"),
        ],
        timeouts,
    ]
    .concat();
    let server = ServeProcess::start(&db, &vars);
    wait_for_status(&server.url("/health"), 200).await;
    (db, server)
}

#[tokio::test(flavor = "multi_thread")]
async fn slowloris_connections_are_closed_within_the_timeouts() {
    probe::raise_open_files();
    let (_db, server) = intake_server(&[
        ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "2"),
        ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "2"),
        ("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", "2"),
    ])
    .await;
    let count = if crate::long() { 2000 } else { 400 };
    let mut slow_heads = Vec::new();
    let mut slow_bodies = Vec::new();
    for n in 0..count {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port))
            .await
            .unwrap();
        if n % 2 == 0 {
            stream
                .write_all(b"POST /f/contact HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await
                .unwrap();
            slow_heads.push(stream);
        } else {
            stream
                .write_all(b"POST /f/contact HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\na=")
                .await
                .unwrap();
            slow_bodies.push(stream);
        }
    }
    let opened = Instant::now();
    // Intake for others while they trickle.
    let during = intake_latencies(&server.url("/f/contact"), 50).await;
    let mut all: Vec<TcpStream> = slow_heads.into_iter().chain(slow_bodies).collect();
    let mut open = all.len();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buffer = [0u8; 1024];
    while open > 0 && Instant::now() < deadline {
        open = 0;
        for stream in &mut all {
            let _ = stream.write_all(b"a").await;
            match tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buffer)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {}
                Ok(Ok(_)) | Err(_) => open += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Answered (a 408 for the bodies) or closed, all of them: keep reading until EOF.
    let mut still_open = 0;
    for stream in &mut all {
        let closed = loop {
            match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                Ok(Ok(_)) => continue,
                Err(_) => break false,
            }
        };
        if !closed {
            still_open += 1;
        }
    }
    println!(
        "slowloris: {count} connections, all closed {:.1} s after opening; intake p50 {:?} p99 {:?} meanwhile",
        opened.elapsed().as_secs_f64(),
        percentile(&during, 0.5),
        percentile(&during, 0.99)
    );
    assert_eq!(still_open, 0, "slowloris connections outlived the timeouts");
    assert!(opened.elapsed() < Duration::from_secs(12));
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_idle_connections_leave_intake_at_its_latency() {
    probe::raise_open_files();
    let (_db, server) = intake_server(&[
        // Idle connections stay for the whole measurement.
        ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "120"),
        ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "120"),
    ])
    .await;
    let url = server.url("/f/contact");
    intake_latencies(&url, 50).await;
    let before = intake_latencies(&url, 200).await;
    let count = 10_000;
    let mut idle = Vec::with_capacity(count);
    // In batches well inside the listen backlog, so that none is dropped by the kernel;
    // from ten loopback addresses, a thousand each: one address may hold at most
    // FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS (1024) connections.
    let connect_from = |source: [u8; 4], port: u16| async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::from((source, 0)))?;
        socket
            .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .await
    };
    for batch_number in 0..count / 100 {
        let source = [127, 0, 0, 2 + (batch_number % 10) as u8];
        let batch =
            futures_util::future::join_all((0..100).map(|_| connect_from(source, server.port)))
                .await;
        for stream in batch {
            idle.push(stream.expect("idle connection"));
        }
    }
    // The server really holds them all.
    let deadline = Instant::now() + Duration::from_secs(20);
    while probe::descriptors(server.child.id()).1 < count {
        assert!(
            Instant::now() < deadline,
            "the server did not take every connection"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = intake_latencies(&url, 200).await;
    println!(
        "idle connections: {count} held; intake p50 {:?} → {:?}, p99 {:?} → {:?}",
        percentile(&before, 0.5),
        percentile(&during, 0.5),
        percentile(&before, 0.99),
        percentile(&during, 0.99)
    );
    // Normal latency: the same order as without them (generous against a noisy machine).
    assert!(
        percentile(&during, 0.99) < percentile(&before, 0.99) * 10 + Duration::from_millis(100),
        "intake slowed down with idle connections held"
    );
    drop(idle);
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sockets_under_a_low_open_file_limit_do_not_starve_the_worker() {
    // With 1,024 descriptors, connections are capped so that the pool, the listener and the
    // worker's outbound requests keep theirs: a flood of idle clients waits in the backlog
    // instead of making the worker's connects fail (which once turned deliveries failed).
    probe::raise_open_files();
    let receiver = support::receiver::Receiver::start().await;
    let db = TestDb::new().await;
    db.insert_webhook_endpoint("contact", receiver.url("/ok"))
        .await;
    let server = ServeProcess::start_limited(
        &db,
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "4"),
            ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "4"),
        ],
        Some(1024),
    );
    wait_for_status(&server.url("/ready"), 200).await;
    let mut idle = Vec::new();
    for _ in 0..12 {
        let batch = futures_util::future::join_all(
            (0..100).map(|_| TcpStream::connect(("127.0.0.1", server.port))),
        )
        .await;
        idle.extend(batch.into_iter().flatten());
    }
    // Deliveries queued meanwhile (through the database: the server's own intake is
    // behind the idle crowd) all succeed.
    let mut conn = db.connect().await;
    use diesel_async::RunQueryDsl;
    for n in 0..20 {
        diesel::sql_query(format!(
            "WITH s AS (INSERT INTO submissions (id, endpoint_id, received_at, fields)
                 VALUES ('sub_{n:032x}', 'contact', now(), '{{\"n\":[\"1\"]}}') RETURNING id)
             INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_id,
                 destination_url, signing_secret, next_attempt_at, created_at)
             SELECT 'whd_{n:032x}', s.id, ds.endpoint_id, ds.id, ds.url, ds.secret, now(), now()
             FROM s, destinations ds WHERE ds.endpoint_id = 'contact'"
        ))
        .execute(&mut conn)
        .await
        .expect("queue");
    }
    receiver.wait_for(20).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let view = probe::queue(&db).await;
        if view.delivered == 20 {
            assert_eq!(view.failed, 0);
            break;
        }
        assert!(Instant::now() < deadline, "{view:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(server.log_text().contains("FORMS_HTTP_MAX_CONNECTIONS"));
    // Once the idle ones time out, intake answers again.
    drop(idle);
    let latencies = intake_latencies(&server.url("/f/contact"), 5).await;
    assert_eq!(latencies.len(), 5);
    server.kill();
}
