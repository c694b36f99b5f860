//! PostgreSQL stopped under load and started again: quick 503s and a failing readiness
//! probe meanwhile, the workers back off, and everything recovers without a restart.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hymical_forms::testing::config::Secret;
use hymical_forms::testing::db;
use hymical_forms::testing::embedded;

use crate::probe;
use support::harness::{wait_for_status, ServeProcess, TestDb};
use support::receiver::Receiver;

/// A cluster of this test's own (the shared one must keep running), on a fixed port so it
/// can be stopped and started where the service expects it.
struct OwnCluster {
    cluster: embedded::Cluster,
    settings: embedded::ServerSettings,
    server: Option<embedded::RunningServer>,
    url: Secret,
}

impl OwnCluster {
    fn start() -> OwnCluster {
        let root =
            std::env::temp_dir().join(format!("hymical-outage-{}", uuid::Uuid::new_v4().simple()));
        let cluster = embedded::Cluster::new(&root).expect("server binaries");
        cluster
            .hand_root_to_server_user()
            .expect("cluster directory");
        cluster.initialize().expect("initdb");
        let mut settings = embedded::ServerSettings::throwaway();
        settings.remove_after_stop = false;
        settings.port = Some(support::harness::free_port());
        let (started, connection) = cluster.ensure_running(&settings).expect("start");
        let server = match started {
            embedded::Started::ByUs(server) => Some(server),
            embedded::Started::AlreadyRunning => None,
        };
        OwnCluster {
            cluster,
            settings,
            server,
            url: connection.url("postgres"),
        }
    }

    fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
    }

    fn restart(&mut self) {
        let (started, _) = self
            .cluster
            .ensure_running(&self.settings)
            .expect("restart");
        if let embedded::Started::ByUs(server) = started {
            self.server = Some(server);
        }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(self.cluster.root());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_database_gives_quick_503s_and_full_recovery_without_a_restart() {
    let mut own = tokio::task::spawn_blocking(OwnCluster::start)
        .await
        .expect("cluster");
    let url = own.url.clone();
    db::migrations::run_pending(&url).await.expect("migrate");
    let test_db = TestDb::external("postgres", url.clone());
    let receiver = Receiver::start().await;
    test_db
        .insert_webhook_endpoint("contact", receiver.url("/ok"))
        .await;
    let statement_timeout = 2.0;
    let server = ServeProcess::start(
        &test_db,
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", "2"),
            ("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "1"),
            ("FORMS_WORKER_POLL_SECONDS", "0.2"),
        ],
    );
    wait_for_status(&server.url("/ready"), 200).await;

    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::new(Mutex::new(Vec::<(u16, Duration, String)>::new()));
    let load = {
        let (stop, accepted, answers) = (stop.clone(), accepted.clone(), answers.clone());
        let url = server.url("/f/contact");
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            for n in 0..100_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let started = Instant::now();
                let response =
                    support::harness::post_urlencoded(&client, &url, format!("n={n}")).await;
                let Ok(response) = response else { continue };
                let status = response.status().as_u16();
                let body: serde_json::Value = response.json().await.unwrap_or_default();
                if status == 202 {
                    if let Some(id) = body["submission_id"].as_str() {
                        accepted.lock().expect("accepted").push(id.to_string());
                    }
                }
                let code = body["error"]["code"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                answers
                    .lock()
                    .expect("answers")
                    .push((status, started.elapsed(), code));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_outage = accepted.lock().expect("accepted").len();
    assert!(before_outage > 0);

    tokio::task::block_in_place(|| own.stop());
    tokio::time::sleep(Duration::from_secs(1)).await;
    answers.lock().expect("answers").clear();
    let ready = reqwest::get(server.url("/ready")).await.expect("ready");
    assert_eq!(ready.status(), 503);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during: Vec<(u16, Duration, String)> = answers.lock().expect("answers").clone();
    // Quick answers: no request waits for a connection that cannot come (one every half
    // second tries again, within the connect timeout).
    assert!(
        during.len() >= 20,
        "only {} answers in 4 s: {during:?}\n{}",
        during.len(),
        server.log_text()
    );
    for (status, took, code) in &during {
        assert_eq!((*status, code.as_str()), (503, "storage_unavailable"));
        assert!(
            took.as_secs_f64() < statement_timeout,
            "an answer during the outage took {took:?}"
        );
    }

    tokio::task::block_in_place(|| own.restart());
    let recovered = Instant::now();
    loop {
        let ready = reqwest::get(server.url("/ready")).await.expect("ready");
        if ready.status() == 200 {
            break;
        }
        assert!(recovered.elapsed() < Duration::from_secs(30), "no recovery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    load.await.expect("load");
    let accepted = accepted.lock().expect("accepted").clone();
    assert!(
        accepted.len() > before_outage,
        "nothing accepted after the outage"
    );

    probe::settled(&test_db, Duration::from_secs(60)).await;
    let stored = probe::stored(&test_db, &accepted).await;
    assert_eq!(stored.len(), accepted.len(), "a 202 was lost");
    assert!(stored
        .iter()
        .all(|(_, state)| state.as_deref() == Some("delivered")));
    let log = server.log_text();
    // The same process served before and after, and its workers backed off meanwhile.
    assert!(log.contains("claiming failed; retrying"), "{log}");
    println!(
        "outage: {} accepted ({} before the stop), {} answers during it, all 503 storage_unavailable, lost: 0",
        accepted.len(),
        before_outage,
        during.len()
    );
    server.kill();
}
