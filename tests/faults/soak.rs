//! Steady intake and delivery for a while, sampling the server's memory, descriptors,
//! sockets and database connections: flat after warm-up, nothing leaked, no stuck claims.
//! `FORMS_SOAK_SECONDS` sets the duration (60 by default, the documented run uses 600).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::probe;
use support::harness::{wait_for_status, ServeProcess, TestDb};
use support::receiver::Receiver;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: f64,
    rss_kb: u64,
    descriptors: usize,
    sockets: usize,
    connections: i64,
    processing: i64,
    pending: i64,
}

fn mean(samples: &[Sample], pick: impl Fn(&Sample) -> f64) -> f64 {
    samples.iter().map(pick).sum::<f64>() / samples.len().max(1) as f64
}

#[tokio::test(flavor = "multi_thread")]
async fn a_soak_of_steady_intake_and_delivery_stays_flat() {
    let seconds: u64 = std::env::var("FORMS_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
        .clamp(10, 24 * 3600);
    let receiver = Receiver::start().await;
    let db = TestDb::new().await;
    for id in ["soak-a", "soak-b", "soak-c"] {
        db.insert_webhook_endpoint(id, receiver.url("/ok")).await;
    }
    let server = ServeProcess::start(
        &db,
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_DATABASE_POOL_SIZE", "8"),
        ],
    );
    wait_for_status(&server.url("/ready"), 200).await;
    let pid = server.child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let ports = Arc::new(Mutex::new(vec![server.port]));
    let load = crate::chaos::steady_intake(
        ports,
        &["soak-a", "soak-b", "soak-c"],
        stop.clone(),
        accepted.clone(),
        Duration::from_millis(10),
    );
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let view = probe::queue(&db).await;
        let (descriptors, sockets) = probe::descriptors(pid);
        samples.push(Sample {
            at: started.elapsed().as_secs_f64(),
            rss_kb: probe::rss_kb(pid),
            descriptors,
            sockets,
            connections: view.service_connections,
            processing: view.processing,
            pending: view.pending,
        });
    }
    stop.store(true, Ordering::SeqCst);
    load.await.expect("load");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view = probe::queue(&db).await;
        if view.pending == 0 && view.processing == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "stuck claims: {view:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let accepted = accepted.lock().expect("accepted").clone();
    let stored = probe::stored(&db, &accepted).await;
    assert_eq!(stored.len(), accepted.len());
    assert!(stored
        .iter()
        .all(|(_, state)| state.as_deref() == Some("delivered")));
    println!(
        "soak: {seconds} s, {} submissions accepted and delivered",
        accepted.len()
    );
    println!("   t(s)   rss(kB)  fds  sockets  db-conns  processing  pending");
    for s in &samples {
        println!(
            "{:7.0} {:9} {:4} {:8} {:9} {:11} {:8}",
            s.at, s.rss_kb, s.descriptors, s.sockets, s.connections, s.processing, s.pending
        );
    }
    // After a warm-up third, the middle and last thirds: nothing grows.
    let third = samples.len() / 3;
    let (middle, last) = (&samples[third..2 * third], &samples[2 * third..]);
    let rss = (
        mean(middle, |s| s.rss_kb as f64),
        mean(last, |s| s.rss_kb as f64),
    );
    assert!(
        rss.1 < rss.0 * 1.10 + 8.0 * 1024.0,
        "memory grew: {:.0} kB then {:.0} kB",
        rss.0,
        rss.1
    );
    let fds_max = samples[third..]
        .iter()
        .map(|s| s.descriptors)
        .max()
        .unwrap_or(0);
    let fds_min = samples[third..]
        .iter()
        .map(|s| s.descriptors)
        .min()
        .unwrap_or(0);
    assert!(
        fds_max <= fds_min + 40,
        "descriptors grew: {fds_min} → {fds_max}"
    );
    // The pool (8), the listener connection and nothing more.
    assert!(samples.iter().all(|s| s.connections <= 8 + 2));
    server.kill();
}
