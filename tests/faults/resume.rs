//! Resume across restarts: events younger than the retention window survive any number of
//! restarts (each of which prunes) and `afterEventId` after a restart returns exactly the
//! events missed meanwhile.

use std::time::Duration;

use diesel::{ExpressionMethods, QueryDsl};
use diesel_async::RunQueryDsl;

use crate::probe;
use support::harness::{wait_for_status, ServeProcess, TestDb};
use support::receiver::Receiver;
use support::ws_client::{event_id, Frame, WsClient};

const SERVER: &[(&str, &str)] = &[
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_WORKER_POLL_SECONDS", "0.2"),
    ("FORMS_EVENT_RETENTION_HOURS", "1"),
];

async fn event_ids_after(db: &TestDb, after: i64) -> Vec<i64> {
    use hymical_forms::testing::db::schema::delivery_events::dsl::*;
    let mut conn = db.connect().await;
    delivery_events
        .filter(id.gt(after))
        .order(id.asc())
        .select(id)
        .load(&mut conn)
        .await
        .expect("event ids")
}

/// Every event the subscription sends until it is quiet for a second.
async fn drain(client: &mut WsClient, operation: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    while let Some(frame) = client.next_within(Duration::from_secs(1)).await {
        match frame {
            Frame::Json(message) if message["type"] == "next" && message["id"] == operation => {
                assert!(message["payload"]["errors"].is_null(), "{message}");
                ids.push(event_id(
                    &message["payload"]["data"]["deliveryStateChanged"],
                ));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn afterevent_id_after_restarts_returns_exactly_the_missed_events() {
    let restarts = if crate::long() { 20 } else { 6 };
    let receiver = Receiver::start().await;
    let db = TestDb::new().await;
    db.insert_webhook_endpoint("contact", receiver.url("/ok"))
        .await;
    let key = db.insert_admin_key("resume").await;
    // The writer stays up; the server the subscriber uses is restarted again and again.
    let writer = ServeProcess::start(&db, SERVER);
    wait_for_status(&writer.url("/ready"), 200).await;
    let mut server = ServeProcess::start(&db, SERVER);
    wait_for_status(&server.url("/ready"), 200).await;
    let client_post = reqwest::Client::new();
    let post = async |url: String, n: usize| {
        let response = support::harness::post_urlencoded(&client_post, url, format!("n={n}"))
            .await
            .expect("post");
        assert_eq!(response.status(), 202);
    };
    let mut last = 0i64;
    let mut seen = 0usize;
    for round in 0..restarts {
        let ws = format!("ws://127.0.0.1:{}/graphql/ws", server.port);
        let mut client = WsClient::ready(&ws, &key).await;
        client
            .subscribe_events("s", &format!(r#"afterEventId: "{last}""#))
            .await;
        // What was missed while no subscriber listened (or the server was down), then
        // what happens now, live.
        for n in 0..5 {
            post(server.url("/f/contact"), round * 10 + n).await;
        }
        probe::settled(&db, Duration::from_secs(60)).await;
        let received = drain(&mut client, "s").await;
        let stored = event_ids_after(&db, last).await;
        assert_eq!(
            received, stored,
            "round {round}: not exactly the missed events"
        );
        seen += received.len();
        last = *received.last().expect("events");
        // Down: a SIGKILL or a SIGTERM, and changes made meanwhile through the writer.
        if round % 2 == 0 {
            server.kill();
        } else {
            let (status, log) = server.stop_within(Duration::from_secs(20));
            assert!(status.is_some_and(|s| s.success()), "{log}");
        }
        for n in 0..5 {
            post(writer.url("/f/contact"), round * 10 + 5 + n).await;
        }
        probe::settled(&db, Duration::from_secs(60)).await;
        // A new server prunes at start (retention one hour: nothing is that old).
        server = ServeProcess::start(&db, SERVER);
        wait_for_status(&server.url("/ready"), 200).await;
    }
    let ws = format!("ws://127.0.0.1:{}/graphql/ws", server.port);
    let mut client = WsClient::ready(&ws, &key).await;
    client
        .subscribe_events("s", &format!(r#"afterEventId: "{last}""#))
        .await;
    let received = drain(&mut client, "s").await;
    assert_eq!(received, event_ids_after(&db, last).await);
    seen += received.len();
    println!("resume: {restarts} restarts, {seen} events received, each exactly once, none lost");
    server.kill();
    writer.kill();
}
