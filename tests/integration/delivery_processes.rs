//! Delivery across real processes: crash recovery after SIGKILL, graceful shutdown, and
//! several processes sharing one database.

use std::collections::HashMap;

use support::harness::{wait_for_status, ServeProcess, TestApp};
use support::receiver::Receiver;

const WORKER_ONLY: &[(&str, &str)] = &[
    ("FORMS_API_ENABLED", "false"),
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1"),
    ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "1"),
    ("FORMS_WORKER_LEASE_SECONDS", "3"),
];

#[tokio::test(flavor = "multi_thread")]
async fn claims_of_a_killed_worker_are_delivered_by_another_after_the_lease() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_without_rate_limit().await;
    app.webhook_endpoint("contact", &receiver.url("/hang"))
        .await;
    for _ in 0..5 {
        app.submit("contact", "a=1").await;
    }
    let doomed = ServeProcess::start(&app.db, WORKER_ONLY);
    // All five are in flight at the receiver, which does not answer: kill the worker now.
    receiver.wait_for(5).await;
    doomed.kill();
    let held = app.db.deliveries().await;
    assert!(
        held.iter()
            .all(|d| d.state == "processing" && d.attempts == 0),
        "{held:?}"
    );
    receiver.stop_hanging();

    let rescuer = ServeProcess::start(&app.db, WORKER_ONLY);
    let delivered = app
        .db
        .wait_for_deliveries(60, |rows| rows.iter().all(|d| d.state == "delivered"))
        .await;
    for delivery in &delivered {
        // The killed worker's requests were never recorded; the rescuer's one was.
        assert_eq!((delivery.attempts, delivery.cycle_attempts), (1, 1));
        let attempts = app.db.attempts(&delivery.id).await;
        assert_eq!(attempts.len(), 1);
        assert!(!attempts[0].late);
    }
    // At least once: each was sent twice, once by the dead worker and once after its
    // lease expired. Nothing stays processing.
    assert_eq!(receiver.received().len(), 10);
    assert!(app
        .db
        .deliveries()
        .await
        .iter()
        .all(|d| d.state != "processing"));
    let (status, _) = rescuer.stop();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_a_slow_delivery_finish_and_records_it() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_without_rate_limit().await;
    let secret = app
        .webhook_endpoint("contact", &receiver.url("/slow/1500"))
        .await;
    let serve = ServeProcess::start(
        &app.db,
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ],
    );
    wait_for_status(&serve.url("/ready"), 200).await;
    let response = support::harness::post_urlencoded(
        &reqwest::Client::new(),
        serve.url("/f/contact"),
        "email=private-person%40example.com&note=sensitive-value",
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 202);
    receiver.wait_for(1).await;
    let (status, log) = serve.stop();
    assert!(status.success(), "graceful exit: {status}\n{log}");
    assert!(log.contains("waiting for requests in flight"), "{log}");
    let delivery = &app.db.deliveries().await[0];
    assert_eq!(
        delivery.state, "delivered",
        "the slow request finished and was recorded"
    );
    let attempts = app.db.attempts(&delivery.id).await;
    assert_eq!(
        (attempts.len(), attempts[0].outcome.as_str()),
        (1, "succeeded")
    );
    assert!(
        attempts[0].duration_ms >= 1000,
        "{}",
        attempts[0].duration_ms
    );

    // Data handling: no secret, field name or value, or client address in the log.
    assert!(
        log.contains("delivery attempt"),
        "one line per attempt: {log}"
    );
    for forbidden in [
        secret.as_str(),
        "sensitive-value",
        "private-person",
        "note",
        "127.0.0.1:",
    ] {
        let hits: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(forbidden) && !l.contains("listening"))
            .collect();
        assert!(hits.is_empty(), "{forbidden:?} logged: {hits:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_across_two_processes_is_delivered_exactly_once_each() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_without_rate_limit().await;
    for endpoint in 0..10 {
        app.webhook_endpoint(&format!("burst-{endpoint}"), &receiver.url("/hook"))
            .await;
    }
    let vars = [
        ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_DATABASE_POOL_SIZE", "8"),
    ];
    let processes = [
        ServeProcess::start(&app.db, &vars),
        ServeProcess::start(&app.db, &vars),
    ];
    for process in &processes {
        wait_for_status(&process.url("/ready"), 200).await;
    }
    let urls: Vec<String> = processes.iter().map(|p| p.url("")).collect();
    let total = 2000;
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for lane in 0..16 {
        let client = client.clone();
        let urls = urls.clone();
        tasks.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            for n in (lane..total).step_by(16) {
                let url = format!("{}/f/burst-{}", urls[n % 2], n % 10);
                let response = support::harness::post_urlencoded(&client, url, format!("n={n}"))
                    .await
                    .unwrap();
                assert_eq!(response.status(), 202);
                let body: serde_json::Value = response.json().await.unwrap();
                accepted.push(body["submission_id"].as_str().unwrap().to_string());
            }
            accepted
        }));
    }
    let mut accepted = Vec::new();
    for task in tasks {
        accepted.extend(task.await.unwrap());
    }
    assert_eq!(accepted.len(), total);
    app.db
        .wait_for_deliveries(180, |rows| {
            rows.len() == total && rows.iter().all(|d| d.state == "delivered")
        })
        .await;
    let mut per_submission: HashMap<String, usize> = HashMap::new();
    for request in receiver.received() {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        *per_submission
            .entry(body["submission"]["id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(per_submission.len(), total, "no delivery lost");
    for id in &accepted {
        assert_eq!(
            per_submission.get(id),
            Some(&1),
            "no lease expired, so no duplicate: {id}"
        );
    }
    for process in processes {
        let (status, log) = process.stop();
        assert!(status.success(), "{log}");
    }
    // The trigger-kept counts agree with the rows after every transition of the burst.
    let key = app.create_key("counts").await.1;
    let counts = app
        .gql(
            &key,
            "{ deliveryCounts { pending processing delivered failed } }",
            serde_json::json!({}),
        )
        .await;
    assert_eq!(
        counts["data"]["deliveryCounts"],
        serde_json::json!({"pending": 0, "processing": 0, "delivered": total, "failed": 0})
    );
}
