//! Batched recording: results of requests that finish together are recorded by one
//! statement, each under its own fence. The test holds a lock the record statement needs
//! while twelve held requests are let go, so their results pile up behind the writer.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, RunQueryDsl};
use hymical_forms::testing::clock::SystemClock;

use support::harness::TestApp;
use support::receiver::Receiver;

#[tokio::test(flavor = "multi_thread")]
async fn attempts_finishing_together_are_recorded_together_each_fenced() {
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_WORKER_BATCH_SIZE", "20"),
            ("FORMS_WORKER_ENDPOINT_CONCURRENCY", "20"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    let receiver = Receiver::start().await;
    app.webhook_endpoint("held", &receiver.url("/hang")).await;
    for n in 0..12 {
        app.submit("held", &format!("n={n}")).await;
    }
    let worker = app.worker(None);
    let run = tokio::spawn(async move { worker.run_once().await.unwrap() });
    receiver.wait_for(12).await;

    // One claim is superseded while its request is out: its attempt must come back late.
    let superseded = app.db.deliveries().await[0].id.clone();
    let mut conn = app.db.connect().await;
    diesel::sql_query(format!(
        "UPDATE webhook_deliveries SET claim_token = 'clm_{}' WHERE id = '{superseded}'",
        "0".repeat(32)
    ))
    .execute(&mut conn)
    .await
    .unwrap();

    // Hold the attempts table, let every request answer, and let the results pile up.
    let mut lock = app.db.connect().await;
    lock.begin_test_transaction().await.unwrap();
    diesel::sql_query("LOCK TABLE delivery_attempts IN EXCLUSIVE MODE")
        .execute(&mut lock)
        .await
        .unwrap();
    receiver.stop_hanging();
    app.db.until_waiting_for_locks(1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(lock);
    assert_eq!(run.await.unwrap(), 12);

    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM delivery_attempts")
            .await,
        12
    );
    let transactions = app
        .db
        .count("SELECT count(DISTINCT xmin::text) AS n FROM delivery_attempts")
        .await;
    assert!(
        transactions <= 4,
        "12 attempts in {transactions} transactions"
    );
    // Each fenced on its own: the superseded one late, its delivery untouched.
    let late: Vec<String> = app
        .db
        .attempts(&superseded)
        .await
        .into_iter()
        .map(|a| format!("{} {}", a.attempt_number, a.late))
        .collect();
    assert_eq!(late, ["1 true"]);
    for delivery in app.db.deliveries().await {
        let attempts = app.db.attempts(&delivery.id).await;
        assert_eq!(attempts.len(), 1, "{delivery:?}");
        if delivery.id == superseded {
            assert_eq!(
                delivery.state, "processing",
                "the other claim still holds it"
            );
            assert_eq!(delivery.cycle_attempts, 0);
        } else {
            assert_eq!(delivery.state, "delivered", "{delivery:?}");
            assert!(!attempts[0].late);
        }
    }
}
