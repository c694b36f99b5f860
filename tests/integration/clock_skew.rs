//! Leases and due times are judged by the database's clock, which every process shares:
//! worker processes whose own clocks are minutes apart (libfaketime) neither take each
//! other's live claims nor sit on expired ones.

use std::time::{Duration, Instant};

use support::harness::{ServeProcess, TestApp};
use support::receiver::Receiver;

/// libfaketime's preload library, installed by `cargo xtask setup` (Debian: `faketime`).
fn libfaketime() -> String {
    for dir in [
        "/usr/lib/x86_64-linux-gnu/faketime",
        "/usr/lib/aarch64-linux-gnu/faketime",
        "/usr/lib/faketime",
    ] {
        let path = format!("{dir}/libfaketime.so.1");
        if std::path::Path::new(&path).exists() {
            return path;
        }
    }
    panic!("libfaketime is not installed: apt-get install faketime (`cargo xtask setup` does)");
}

fn worker_vars(offset: &str, preload: &str) -> Vec<(&'static str, String)> {
    vec![
        ("FORMS_API_ENABLED", "false".into()),
        ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true".into()),
        ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1".into()),
        ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "5".into()),
        ("FORMS_WORKER_LEASE_SECONDS", "12".into()),
        ("FORMS_WORKER_POLL_SECONDS", "0.2".into()),
        ("FORMS_WORKER_ENDPOINT_CONCURRENCY", "100".into()),
        ("LD_PRELOAD", preload.into()),
        ("FAKETIME", offset.into()),
        // Timers and sleeps keep real time; only the wall clock is skewed.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
}

fn start(app: &TestApp, vars: &[(&'static str, String)]) -> ServeProcess {
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    ServeProcess::start(&app.db, &vars)
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_with_clocks_minutes_apart_agree_on_leases() {
    let preload = libfaketime();
    let receiver = Receiver::start().await;
    let app = TestApp::start_without_rate_limit().await;
    app.webhook_endpoint("contact", &receiver.url("/hang"))
        .await;
    for n in 0..5 {
        app.submit("contact", &format!("n={n}")).await;
    }
    // A worker on true time takes all five; the receiver holds them.
    let owner = start(&app, &worker_vars("+0", &preload));
    receiver.wait_for(5).await;
    // A second worker whose clock runs five minutes ahead: by its own clock every lease
    // ran out long ago, by the database's none has.
    let ahead = start(&app, &worker_vars("+300s", &preload));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        receiver.received().len(),
        5,
        "the worker running ahead took claims still in flight"
    );
    assert!(app
        .db
        .deliveries()
        .await
        .iter()
        .all(|d| d.state == "processing" && d.attempts == 0));

    // The owner dies; a worker five minutes behind takes over once the lease really ends
    // (12 s), not five minutes later.
    ahead.kill();
    owner.kill();
    receiver.stop_hanging();
    let killed_at = Instant::now();
    let _behind = start(&app, &worker_vars("-300s", &preload));
    let delivered = app
        .db
        .wait_for_deliveries(120, |rows| rows.iter().all(|d| d.state == "delivered"))
        .await;
    assert!(
        killed_at.elapsed() < Duration::from_secs(60),
        "expired leases waited {:?}",
        killed_at.elapsed()
    );
    for delivery in &delivered {
        let attempts = app.db.attempts(&delivery.id).await;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert!(!attempts[0].late);
    }
    // Five requests went out under the first claims, five after the takeover.
    assert_eq!(receiver.received().len(), 10);
}
