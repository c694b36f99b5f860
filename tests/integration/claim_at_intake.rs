//! Claiming at intake (docs/delivery.md): a `serve` process whose worker has nothing else
//! to do gets a new delivery already claimed in the transaction that writes its
//! submission, under the rules of every claim: the endpoint's claim lock, its cap on
//! requests in flight, never for a paused endpoint and never ahead of a due delivery.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;

use crate::metrics::{samples, scrape, value};
use support::harness::{wait_for_status, ServeProcess, TestApp};
use support::receiver::Receiver;

const SERVE: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "20"),
];

async fn post(serve: &ServeProcess, endpoint: &str, body: String) -> u16 {
    support::harness::post_urlencoded(
        &reqwest::Client::new(),
        serve.url(&format!("/f/{endpoint}")),
        body,
    )
    .await
    .expect("post")
    .status()
    .as_u16()
}

/// `hymical_deliveries_claimed_total` by where: (worker, intake).
async fn claimed(serve: &ServeProcess, key: &str) -> (f64, f64) {
    let (status, _, text) = scrape(&serve.url("/metrics"), Some(key)).await;
    assert_eq!(status, 200, "{text}");
    let samples = samples(&text);
    (
        value(&samples, "hymical_deliveries_claimed_total{by=\"worker\"}"),
        value(&samples, "hymical_deliveries_claimed_total{by=\"intake\"}"),
    )
}

/// The kinds of a delivery's events, in their order.
async fn event_kinds(app: &TestApp, delivery_id: &str) -> Vec<String> {
    #[derive(diesel::QueryableByName)]
    struct Kind {
        #[diesel(sql_type = diesel::sql_types::Text)]
        kind: String,
    }
    let mut conn = app.db.connect().await;
    let kinds: Vec<Kind> =
        diesel::sql_query("SELECT kind FROM delivery_events WHERE delivery_id = $1 ORDER BY id")
            .bind::<diesel::sql_types::Text, _>(delivery_id)
            .load(&mut conn)
            .await
            .expect("events");
    kinds.into_iter().map(|k| k.kind).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_worker_gets_new_deliveries_claimed_with_their_submissions() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    app.webhook_endpoint("contact", &receiver.url("/ok")).await;
    let (_, key) = app.create_key("scraper").await;
    let serve = ServeProcess::start(&app.db, SERVE);
    wait_for_status(&serve.url("/health"), 200).await;
    // Another process's workers, listening for wake-ups.
    let mut other = app.db.connect().await;
    diesel::sql_query("LISTEN hymical_delivery_due")
        .execute(&mut other)
        .await
        .expect("listen");

    // The first may arrive before the worker's first claim has found the queue empty;
    // every later one arrives at a worker with nothing else to do.
    for n in 0..6 {
        assert_eq!(post(&serve, "contact", format!("n={n}")).await, 202);
        app.db
            .wait_for_deliveries(30, |rows| {
                rows.len() == n + 1 && rows.iter().all(|d| d.state == "delivered")
            })
            .await;
    }
    let (by_worker, by_intake) = claimed(&serve, &key).await;
    assert_eq!(by_worker + by_intake, 6.0);
    assert!(by_intake >= 5.0, "claimed at intake: {by_intake}");
    // A batch that claimed everything still wakes other processes' workers (a claim of
    // theirs may have skipped the endpoint it held), with the accepting process's mark,
    // which that process's own worker ignores.
    let marked = {
        use futures_util::StreamExt;
        let mut notifications = std::pin::pin!(other.notifications_stream());
        let mut marked = 0;
        while let Ok(Some(notification)) =
            tokio::time::timeout(Duration::from_millis(500), notifications.next()).await
        {
            let notification = notification.expect("notification");
            if !notification.payload.is_empty() {
                marked += 1;
            }
        }
        marked
    };
    assert!(marked >= 5, "marked wake-ups: {marked}");

    // Each was sent once and recorded once; its events are those of any claim, in order.
    assert_eq!(receiver.received().len(), 6);
    for delivery in app.db.deliveries().await.iter().skip(1) {
        assert_eq!((delivery.attempts, delivery.cycle_attempts), (1, 1));
        assert_eq!(
            event_kinds(&app, &delivery.id).await,
            ["created", "claimed", "attempt_recorded"]
        );
        let attempts = app.db.attempts(&delivery.id).await;
        assert_eq!(attempts.len(), 1);
        assert!(!attempts[0].late);
    }
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_at_intake_keep_the_cap_and_leave_a_paused_endpoint_alone() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    app.webhook_endpoint("slow", &receiver.url("/hang")).await;
    app.webhook_endpoint("held", &receiver.url("/ok")).await;
    let (_, key) = app.create_key("scraper").await;
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "UPDATE destinations SET paused_at = now(), pause_reason = 'operator' WHERE endpoint_id = 'held'",
    )
    .execute(&mut conn)
    .await
    .expect("pause");
    let mut vars = SERVE.to_vec();
    vars.push(("FORMS_WORKER_ENDPOINT_CONCURRENCY", "2"));
    // No idle polls: a poll's claim holds the worker's free slots for its moment, and one
    // that coincided with the posts below would leave intake no slot to claim with (by
    // design, and rare; the worker claims after each finished request and when woken).
    vars.push(("FORMS_WORKER_POLL_SECONDS", "3600"));
    let serve = ServeProcess::start(&app.db, &vars);
    wait_for_status(&serve.url("/health"), 200).await;
    // Let the worker's first claim find the queue empty, so intake may claim.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Six at once to an endpoint whose receiver hangs: two in flight (the cap), four wait.
    let posts: Vec<_> = (0..6)
        .map(|n| post(&serve, "slow", format!("n={n}")))
        .collect();
    for status in futures_util::future::join_all(posts).await {
        assert_eq!(status, 202);
    }
    for n in 0..3 {
        assert_eq!(post(&serve, "held", format!("n={n}")).await, 202);
    }
    receiver.wait_for(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.received().len(), 2);
    let in_flight = |endpoint: &str, state: &str| {
        format!(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = '{endpoint}' AND state = '{state}'"
        )
    };
    assert_eq!(app.db.count(&in_flight("slow", "processing")).await, 2);
    assert_eq!(app.db.count(&in_flight("slow", "pending")).await, 4);
    // The paused endpoint's deliveries wait, claimed by nobody.
    assert_eq!(app.db.count(&in_flight("held", "pending")).await, 3);
    // The two in flight: the first at intake (the worker had nothing to do), the second
    // at intake too or by the worker, woken by a batch intake left pending.
    let (by_worker, by_intake) = claimed(&serve, &key).await;
    assert_eq!(by_worker + by_intake, 2.0);
    assert!(by_intake >= 1.0, "claimed at intake: {by_intake}");

    receiver.stop_hanging();
    let delivered = app
        .db
        .wait_for_deliveries(60, |rows| {
            rows.iter().filter(|d| d.state == "delivered").count() == 6
        })
        .await;
    assert_eq!(delivered.iter().filter(|d| d.state == "pending").count(), 3);
    assert_eq!(receiver.received().len(), 6);
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");
}

/// The room function itself, with the other claimers' state made by hand on independent
/// connections: a lock held elsewhere, a pause, a due delivery and a full cap each leave
/// an endpoint out; the rest get the cap less what is in flight, at most `limit` of them.
#[tokio::test(flavor = "multi_thread")]
async fn intake_claim_room_follows_the_rules_of_every_claim() {
    #[derive(diesel::QueryableByName, Debug, PartialEq)]
    struct Room {
        #[diesel(sql_type = diesel::sql_types::Text)]
        endpoint_id: String,
        #[diesel(sql_type = diesel::sql_types::Integer)]
        free_slots: i32,
    }
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    for id in ["free", "locked", "paused", "queued", "busy", "roomy"] {
        app.webhook_endpoint(id, "https://receiver.example/hook")
            .await;
    }
    app.submit("queued", "a=1").await;
    app.submit("busy", "a=1").await;
    app.submit("roomy", "a=1").await;
    let mut setup = app.db.connect().await;
    for statement in [
        "UPDATE destinations SET paused_at = now(), pause_reason = 'operator' WHERE endpoint_id = 'paused'",
        "UPDATE webhook_deliveries SET state = 'processing', claim_token = 'clm_' || md5(id),
             claim_expires_at = now() + interval '1 hour' WHERE endpoint_id IN ('busy', 'roomy')",
    ] {
        diesel::sql_query(statement)
            .execute(&mut setup)
            .await
            .expect("setup");
    }
    // Another claim holds `locked`'s claim lock.
    let mut other = app.db.connect().await;
    let locked = "SELECT pg_advisory_lock(1752788324, hashtext(id)) FROM destinations WHERE endpoint_id = 'locked'";
    diesel::sql_query(locked)
        .execute(&mut other)
        .await
        .expect("lock");

    let room = async |cap: i32, limit: i32| -> Vec<Room> {
        let mut conn = app.db.connect().await;
        diesel::sql_query(
            "WITH asked AS (
                 SELECT ARRAY(
                     SELECT ds.id FROM destinations ds
                     ORDER BY array_position(
                         ARRAY['free', 'locked', 'paused', 'queued', 'busy', 'roomy']::varchar[],
                         ds.endpoint_id)) AS ids)
             SELECT ds.endpoint_id::text AS endpoint_id, r.free_slots
             FROM asked,
                  intake_claim_destination_room(asked.ids, now(), $1, $2) WITH ORDINALITY AS r
             JOIN destinations ds ON ds.id = r.destination_id
             ORDER BY r.ordinality",
        )
        .bind::<diesel::sql_types::Integer, _>(limit)
        .bind::<diesel::sql_types::Integer, _>(cap)
        .load(&mut conn)
        .await
        .expect("room")
    };
    let entry = |id: &str, free_slots: i32| Room {
        endpoint_id: id.to_string(),
        free_slots,
    };
    // Cap 1: `busy` and `roomy` are full.
    assert_eq!(room(1, 10).await, [entry("free", 1)]);
    // Cap 3: they have two slots left.
    assert_eq!(
        room(3, 10).await,
        [entry("free", 3), entry("busy", 2), entry("roomy", 2)]
    );
    // At most `limit` endpoints are locked and looked at, in the order given.
    assert_eq!(room(3, 1).await, [entry("free", 3)]);
    assert_eq!(room(3, 0).await, []);
    // Once the other claim lets go, `locked` has room too.
    let unlocked = "SELECT pg_advisory_unlock(1752788324, hashtext(id)) FROM destinations WHERE endpoint_id = 'locked'";
    diesel::sql_query(unlocked)
        .execute(&mut other)
        .await
        .expect("unlock");
    assert_eq!(room(1, 10).await, [entry("free", 1), entry("locked", 1)]);

    // What signs a delivery claimed at intake is read after the lock: a rotation
    // committed before it is seen, the replaced secret as the one in its overlap.
    #[derive(diesel::QueryableByName, Debug, PartialEq)]
    struct Signing {
        #[diesel(sql_type = diesel::sql_types::Text)]
        url: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        secret: String,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        previous_secret: Option<String>,
    }
    let old_secret = format!("whsec_{}", "ab".repeat(32));
    let new_secret = format!("whsec_{}", "cd".repeat(32));
    diesel::sql_query(
        "UPDATE destinations SET previous_secret = $2,
             previous_secret_expires_at = now() + interval '1 day', secret = $1,
             url = 'https://receiver.example/new'
         WHERE endpoint_id = 'free'",
    )
    .bind::<diesel::sql_types::Text, _>(&new_secret)
    .bind::<diesel::sql_types::Text, _>(&old_secret)
    .execute(&mut setup)
    .await
    .expect("rotate");
    let mut conn = app.db.connect().await;
    let signing: Vec<Signing> = diesel::sql_query(
        "SELECT url::text AS url, secret::text AS secret, previous_secret::text AS previous_secret
         FROM intake_claim_destination_room(
             ARRAY(SELECT id FROM destinations WHERE endpoint_id = 'free'), now(), 1, 1)",
    )
    .load(&mut conn)
    .await
    .expect("room");
    assert_eq!(
        signing,
        [Signing {
            url: "https://receiver.example/new".into(),
            secret: new_secret,
            previous_secret: Some(old_secret),
        }]
    );
}
