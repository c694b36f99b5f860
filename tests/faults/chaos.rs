//! Two server processes on one database under steady intake, a receiver failing at random
//! (500s, no answer, resets), and repeated SIGKILLs of a random process with restarts.
//! Afterwards every 202 is stored and delivered, attempt numbers per delivery are 1..n,
//! and nothing is left processing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{endpoint, wait_for_status, ServeProcess, TestDb};
use crate::peers::{Behaviour, HostileReceiver};
use crate::probe;

const SERVER: &[(&str, &str)] = &[
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1"),
    ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "1"),
    ("FORMS_WORKER_LEASE_SECONDS", "3"),
    ("FORMS_WORKER_POLL_SECONDS", "0.2"),
    ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "0.2"),
    ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "1"),
    ("FORMS_WEBHOOK_MAX_ATTEMPTS", "10"),
    ("FORMS_SHUTDOWN_TIMEOUT_SECONDS", "2"),
];

/// Posts forms to whichever servers are up, round robin, until `stop`; keeps the id of
/// every submission answered 202.
pub fn steady_intake(
    ports: Arc<Mutex<Vec<u16>>>,
    endpoints: &'static [&'static str],
    stop: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<String>>>,
    pause: Duration,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let mut refused = 0;
        let mut n = 0usize;
        // Bounded: at most a million posts, and `stop` ends it sooner.
        while !stop.load(Ordering::SeqCst) && n < 1_000_000 {
            n += 1;
            let port = {
                let ports = ports.lock().expect("ports");
                ports[n % ports.len()]
            };
            let endpoint = endpoints[n % endpoints.len()];
            let response = client
                .post(format!("http://127.0.0.1:{port}/f/{endpoint}"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("n={n}&note=chaos"))
                .send()
                .await;
            match response {
                Ok(response) if response.status() == 202 => {
                    let body: serde_json::Value = response.json().await.unwrap_or_default();
                    if let Some(id) = body["submission_id"].as_str() {
                        accepted.lock().expect("accepted").push(id.to_string());
                    }
                }
                _ => refused += 1,
            }
            tokio::time::sleep(pause).await;
        }
        refused
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn random_kills_of_two_servers_with_a_flaky_receiver_lose_nothing() {
    let kills = if crate::long() { 30 } else { 10 };
    let receiver = HostileReceiver::start(Behaviour::Chaos).await;
    let db = TestDb::new().await;
    {
        let mut conn = db.connect().await;
        for id in ["chaos-a", "chaos-b"] {
            let row = endpoint(id);
            hymical_forms::testing::db::endpoints::insert(
                &mut conn,
                &row,
                crate::harness::webhook(&row, receiver.url(), crate::harness::webhook_secret()),
            )
            .await
            .expect("endpoint");
        }
    }
    let mut servers = vec![
        ServeProcess::start(&db, SERVER),
        ServeProcess::start(&db, SERVER),
    ];
    for server in &servers {
        wait_for_status(&server.url("/ready"), 200).await;
    }
    let ports = Arc::new(Mutex::new(
        servers.iter().map(|s| s.port).collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let load = steady_intake(
        ports.clone(),
        &["chaos-a", "chaos-b"],
        stop.clone(),
        accepted.clone(),
        Duration::from_millis(5),
    );
    let started = Instant::now();
    let killed = AtomicUsize::new(0);
    for _ in 0..kills {
        let wait = Duration::from_millis(800 + u64::from(rand::random::<u16>() % 1700));
        tokio::time::sleep(wait).await;
        let victim = usize::from(rand::random::<u8>()) % servers.len();
        let dead = servers.remove(victim);
        dead.kill();
        killed.fetch_add(1, Ordering::SeqCst);
        let fresh = ServeProcess::start(&db, SERVER);
        wait_for_status(&fresh.url("/health"), 200).await;
        servers.insert(victim, fresh);
        *ports.lock().expect("ports") = servers.iter().map(|s| s.port).collect();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let refused = load.await.expect("load");
    let accepted = accepted.lock().expect("accepted").clone();
    assert!(accepted.len() > 100, "too little load: {}", accepted.len());

    // The servers that are up deliver everything that is left.
    let deadline = Instant::now() + Duration::from_secs(120);
    let view = loop {
        let view = probe::queue(&db).await;
        if view.pending == 0 && view.processing == 0 {
            break view;
        }
        assert!(Instant::now() < deadline, "not settled: {view:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stored = probe::stored(&db, &accepted).await;
    let lost: Vec<&String> = accepted
        .iter()
        .filter(|id| !stored.iter().any(|(stored, _)| stored == *id))
        .collect();
    assert!(lost.is_empty(), "accepted but not stored: {lost:?}");
    let undelivered: Vec<_> = stored
        .iter()
        .filter(|(_, state)| state.as_deref() != Some("delivered"))
        .collect();
    assert!(undelivered.is_empty(), "{undelivered:?}");
    let gaps = probe::numbering_gaps(&db).await;
    assert!(gaps.is_empty(), "attempt numbers with gaps: {gaps:?}");
    let requests = receiver.hits();
    let chaos = receiver.chaos.lock().expect("chaos").len();
    println!(
        "chaos: {:.0} s, {} SIGKILLs, {} accepted (202), {} refused while a server was down, {} stored, {} delivered, {} failed, {} requests to the receiver for {} submissions, {} lost",
        started.elapsed().as_secs_f64(),
        killed.load(Ordering::SeqCst),
        accepted.len(),
        refused,
        stored.len(),
        view.delivered,
        view.failed,
        requests,
        chaos,
        lost.len()
    );
    for server in servers {
        server.kill();
    }
}
