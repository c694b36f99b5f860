//! Hostile receivers: every attempt ends within the configured timeouts with the right
//! outcome, the server's memory stays flat, and a healthy endpoint's deliveries keep
//! flowing meanwhile.

use std::time::{Duration, Instant};

use diesel_async::RunQueryDsl;

use crate::peers::{Behaviour, HostileReceiver};
use crate::probe;
use support::harness::{wait_for_status, ServeProcess, TestDb};
use support::receiver::Receiver;

const CONNECT_SECONDS: u64 = 1;
const READ_SECONDS: u64 = 2;

#[derive(diesel::QueryableByName, Debug)]
struct Attempt {
    #[diesel(sql_type = diesel::sql_types::Text)]
    endpoint_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    outcome: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Integer>)]
    response_status: Option<i32>,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    duration_ms: i32,
}

async fn attempts(db: &TestDb) -> Vec<Attempt> {
    let mut conn = db.connect().await;
    diesel::sql_query(
        "SELECT d.endpoint_id, a.outcome, a.response_status, a.duration_ms
         FROM delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id",
    )
    .load(&mut conn)
    .await
    .expect("attempts")
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_receivers_end_within_the_timeouts_and_memory_stays_flat() {
    let plain = Receiver::start().await;
    let healthy = Receiver::start().await;
    let hostile = [
        ("trickled-headers", Behaviour::TrickleHeaders),
        ("trickled-body", Behaviour::TrickleBody),
        ("endless-body", Behaviour::EndlessBody),
        ("ten-gigabytes", Behaviour::HugeBody),
        ("redirect-loop", Behaviour::RedirectLoop),
        ("never-reads", Behaviour::AcceptNeverRead),
    ];
    let mut receivers = Vec::new();
    let db = TestDb::new().await;
    for (id, behaviour) in hostile {
        let receiver = HostileReceiver::start(behaviour).await;
        db.insert_webhook_endpoint(id, receiver.url()).await;
        receivers.push(receiver);
    }
    // TLS spoken to a port that answers plain HTTP.
    db.insert_webhook_endpoint(
        "tls-to-plain",
        format!("https://{}/hook", plain.addr.unwrap()),
    )
    .await;
    db.insert_webhook_endpoint("healthy", healthy.url("/ok"))
        .await;
    let server = ServeProcess::start(
        &db,
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1"),
            ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "2"),
            ("FORMS_WORKER_LEASE_SECONDS", "10"),
            ("FORMS_WORKER_POLL_SECONDS", "0.2"),
            ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "0.2"),
            ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "0.5"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "2"),
            // Every hostile delivery is to run its allowance out and be recorded, round
            // after round: no pausing after a run of failures here (endpoint_lifecycle
            // tests that).
            ("FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES", "0"),
            // Seven hostile endpoints at two each leave most of the 32 workers free.
            ("FORMS_WORKER_ENDPOINT_CONCURRENCY", "2"),
        ],
    );
    wait_for_status(&server.url("/ready"), 200).await;
    let pid = server.child.id();
    let client = reqwest::Client::new();
    let endpoints: Vec<&str> = hostile
        .iter()
        .map(|(id, _)| *id)
        .chain(["tls-to-plain"])
        .collect();
    let rounds = if crate::long() { 10 } else { 3 };
    let mut memory = Vec::new();
    for round in 0..rounds {
        for endpoint in endpoints.iter().chain(&["healthy"]) {
            for n in 0..8 {
                let response = support::harness::post_urlencoded(
                    &client,
                    server.url(&format!("/f/{endpoint}")),
                    format!("round={round}&n={n}"),
                )
                .await
                .expect("post");
                assert_eq!(response.status(), 202);
            }
        }
        // The healthy endpoint's deliveries arrive while the hostile ones are in flight.
        let posted = Instant::now();
        healthy.wait_for(8 * (round + 1)).await;
        assert!(
            posted.elapsed() < Duration::from_secs(5),
            "healthy deliveries waited {:?} behind hostile receivers",
            posted.elapsed()
        );
        probe::settled(&db, Duration::from_secs(60)).await;
        memory.push(probe::rss_kb(pid));
    }
    // Every attempt ended within connect + read timeout (plus scheduling slack), with
    // the outcome its receiver deserves.
    let budget_ms = ((CONNECT_SECONDS + READ_SECONDS) * 1000 + 1000) as i32;
    let all = attempts(&db).await;
    for attempt in &all {
        assert!(
            attempt.duration_ms <= budget_ms,
            "{attempt:?} outlasted the timeouts"
        );
        let expected: &[(&str, Option<i32>)] = match attempt.endpoint_id.as_str() {
            "trickled-headers" | "never-reads" => &[("timeout", None)],
            // The status arrived; the body is not waited for.
            "trickled-body" | "endless-body" | "ten-gigabytes" | "healthy" => {
                &[("succeeded", Some(200))]
            }
            "redirect-loop" => &[("http_error", Some(302))],
            "tls-to-plain" => &[("network_error", None)],
            other => panic!("unexpected endpoint {other}"),
        };
        assert!(
            expected.contains(&(attempt.outcome.as_str(), attempt.response_status)),
            "{attempt:?}"
        );
    }
    // Memory after the first round (warm) against the last.
    let (warm, last) = (memory[0], *memory.last().unwrap());
    println!(
        "hostile receivers: {} attempts over {rounds} rounds, RSS {warm} kB after the first, {last} kB after the last",
        all.len()
    );
    assert!(
        last < warm + 30 * 1024,
        "memory grew from {warm} kB to {last} kB"
    );
    // Each hostile receiver was really reached.
    for receiver in &receivers {
        assert!(receiver.hits() > 0);
    }
    server.kill();
}
