//! The history by partition (migration history_partitions; docs/data-model.md): months of
//! events and attempts made under a manual clock go by whole partitions, the queue stays as
//! it is, reads span the partitions, and a database of the previous layout is partitioned
//! in place with its rows.

use std::sync::Arc;

use chrono::{DateTime, Months, TimeZone, Utc};
use diesel::sql_types::{Bool, Integer, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use hymical_forms::testing::clock::{Clock, ManualClock};
use hymical_forms::testing::db;
use hymical_forms::testing::db::events::{EventFilter, HistoryExpired};
use hymical_forms::testing::db::history::HistoryTable;
use hymical_forms::testing::model::ids::DeliveryId;
use hymical_forms::testing::upkeep::history;

use support::harness::{claim_at, TestApp, TestDb};

#[derive(diesel::QueryableByName, Debug)]
struct Partition {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    upper_bound: Option<DateTime<Utc>>,
    #[diesel(sql_type = Bool)]
    is_default: bool,
}

/// The partitions of `table` as the catalog has them, oldest first, the DEFAULT last.
async fn partitions(conn: &mut AsyncPgConnection, table: &str) -> Vec<Partition> {
    diesel::sql_query(format!(
        "SELECT partition::text AS name, upper_bound, is_default \
         FROM history_partitions('{table}') ORDER BY is_default, lower_bound NULLS FIRST"
    ))
    .load(conn)
    .await
    .unwrap()
}

async fn names(conn: &mut AsyncPgConnection, table: &str) -> Vec<String> {
    partitions(conn, table)
        .await
        .into_iter()
        .map(|p| p.name)
        .collect()
}

#[derive(diesel::QueryableByName, Debug, PartialEq)]
struct Placed {
    #[diesel(sql_type = Text)]
    partition: String,
    #[diesel(sql_type = Integer)]
    number: i32,
}

/// Where each attempt of `delivery` lives, by number.
async fn placed_attempts(conn: &mut AsyncPgConnection, delivery: &str) -> Vec<Placed> {
    diesel::sql_query(format!(
        "SELECT tableoid::regclass::text AS partition, attempt_number AS number \
         FROM delivery_attempts WHERE delivery_id = '{delivery}' ORDER BY attempt_number"
    ))
    .load(conn)
    .await
    .unwrap()
}

async fn insert_attempt(
    conn: &mut AsyncPgConnection,
    delivery: &str,
    number: i32,
    at: DateTime<Utc>,
) {
    conn.batch_execute(&format!(
        "INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number, \
             destination_url, attempted_at, outcome, response_status) \
         SELECT 'att_' || replace(gen_random_uuid()::text, '-', ''), id, submission_id, {number}, \
             destination_url, '{at}', 'http_error', 503 \
         FROM webhook_deliveries WHERE id = '{delivery}'",
        at = at.to_rfc3339()
    ))
    .await
    .unwrap();
}

async fn insert_events(
    conn: &mut AsyncPgConnection,
    delivery: &str,
    count: i32,
    at: DateTime<Utc>,
) {
    conn.batch_execute(&format!(
        "INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state, \
             attempts, cycle_attempts, outcome, occurred_at) \
         SELECT id, endpoint_id, 'handed_back', 'pending', 'processing', 0, 0, NULL, '{at}' \
         FROM webhook_deliveries, generate_series(1, {count}) WHERE id = '{delivery}'",
        at = at.to_rfc3339()
    ))
    .await
    .unwrap();
}

async fn event_ids(conn: &mut AsyncPgConnection) -> Vec<i64> {
    use diesel::{ExpressionMethods, QueryDsl};
    use hymical_forms::testing::db::schema::delivery_events::dsl::*;
    delivery_events
        .order(id.asc())
        .select(id)
        .load(conn)
        .await
        .unwrap()
}

async fn pruned_through(conn: &mut AsyncPgConnection) -> i64 {
    use diesel::QueryDsl;
    use hymical_forms::testing::db::schema::delivery_event_retention::dsl::*;
    delivery_event_retention
        .select(pruned_through)
        .first(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn months_of_history_go_by_whole_partitions_and_the_queue_stays() {
    let start = Utc.with_ymd_and_hms(2027, 6, 15, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let app = TestApp::start_with(&[], clock.clone()).await;
    app.webhook_endpoint("contact", "http://127.0.0.1:9/hook")
        .await;
    app.submit("contact", "n=queued").await;
    app.submit("contact", "n=history").await;
    let deliveries = app.db.deliveries().await;
    let (queued, history) = (deliveries[0].id.clone(), deliveries[1].id.clone());
    let mut conn = app.db.connect().await;
    conn.batch_execute(&format!(
        "UPDATE webhook_deliveries SET state = 'delivered', attempts = 7, cycle_attempts = 7, \
             completed_at = now() WHERE id = '{history}'"
    ))
    .await
    .unwrap();

    // Six months, as the workers' hourly pass would see them: partitions made ahead, then
    // each month's attempts and events. The queued delivery was tried once, in month 1.
    let day = chrono::Duration::hours(24);
    for month in 0..6u32 {
        let now = start + Months::new(month);
        clock.set(now);
        history::make_partitions(&app.app.db, clock.now(), day)
            .await
            .unwrap();
        insert_attempt(&mut conn, &history, month as i32 + 1, now).await;
        insert_events(&mut conn, &history, 2, now).await;
        if month == 1 {
            insert_attempt(&mut conn, &queued, 1, now).await;
        }
    }
    let now = start + Months::new(6);
    clock.set(now);
    history::make_partitions(&app.app.db, now, day)
        .await
        .unwrap();
    // Outside every partition: the DEFAULT partitions take them, and nothing fails.
    let long_ago = Utc.with_ymd_and_hms(2001, 1, 1, 0, 0, 0).unwrap();
    insert_events(&mut conn, &history, 1, long_ago).await;
    insert_attempt(&mut conn, &history, 99, long_ago).await;
    insert_attempt(&mut conn, &history, 7, now).await;
    insert_events(&mut conn, &history, 2, now).await;

    // Each month's attempt is in that month's partition.
    let placed = placed_attempts(&mut conn, &history).await;
    let expected: Vec<Placed> = (0..7u32)
        .map(|month| Placed {
            partition: format!(
                "delivery_attempts_{}",
                (start + Months::new(month)).format("%Y%m01")
            ),
            number: month as i32 + 1,
        })
        .chain([Placed {
            partition: "delivery_attempts_default".into(),
            number: 99,
        }])
        .collect();
    assert_eq!(placed, expected);
    let attempt_partitions = names(&mut conn, "delivery_attempts").await;
    assert!(
        attempt_partitions.contains(&"delivery_attempts_20280301".to_string()),
        "three months ahead: {attempt_partitions:?}"
    );

    // The feed and the attempt listing read across every partition, in order.
    let all_events = event_ids(&mut conn).await;
    let page = db::events::page(&mut conn, 0, i64::MAX, &EventFilter::default(), 1000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.iter().map(|e| e.id).collect::<Vec<_>>(), all_events);
    let listed = db::deliveries::attempts_for(&mut conn, &[DeliveryId::parse(&history).unwrap()])
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|a| a.attempt_number).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6, 7, 99]
    );

    // Events kept 24 hours: every partition wholly before the cutoff goes (the days of
    // past months, and the days the template was made on), the DEFAULT's old row is
    // deleted, and the mark moves past every id removed.
    let cutoff = now - day;
    let kept_before: Vec<i64> = {
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            id: i64,
        }
        diesel::sql_query(format!(
            "SELECT id FROM delivery_events WHERE occurred_at >= '{}' ORDER BY id",
            cutoff.to_rfc3339()
        ))
        .load::<Id>(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.id)
        .collect()
    };
    assert_eq!(kept_before.len(), 2);
    let pruned = history::prune(&app.app.db, cutoff).await.unwrap();
    assert_eq!(pruned.rows, 1, "{pruned:?}");
    assert!(pruned.partitions.len() >= 6, "{pruned:?}");
    assert!(pruned
        .partitions
        .contains(&format!("delivery_events_{}", start.format("%Y%m%d"))));
    for partition in partitions(&mut conn, "delivery_events").await {
        assert!(
            partition.is_default || partition.upper_bound.is_some_and(|upper| upper > cutoff),
            "{partition:?} should have gone"
        );
    }
    assert_eq!(event_ids(&mut conn).await, kept_before);
    let mark = pruned_through(&mut conn).await;
    assert!(
        all_events
            .iter()
            .filter(|id| !kept_before.contains(id))
            .all(|id| *id <= mark)
            && kept_before.iter().all(|id| *id > mark),
        "mark {mark}, kept {kept_before:?}"
    );
    assert_eq!(
        db::events::page(&mut conn, 0, i64::MAX, &EventFilter::default(), 10)
            .await
            .unwrap()
            .unwrap_err(),
        HistoryExpired {
            pruned_through: mark
        }
    );
    // A second pass finds nothing more.
    assert_eq!(
        history::prune(&app.app.db, cutoff).await.unwrap(),
        history::Pruned::default()
    );

    // Attempts kept 90 days: June and August go whole; July holds an attempt of the
    // delivery still queued, and stays until it is done; so does every later month.
    let cutoff = now - chrono::Duration::days(90);
    let pruned = history::prune_history(&app.app.db, HistoryTable::Attempts, cutoff)
        .await
        .unwrap();
    assert_eq!(pruned.rows, 1, "the DEFAULT's old attempt: {pruned:?}");
    assert!(pruned
        .partitions
        .contains(&"delivery_attempts_20270601".to_string()));
    assert!(pruned
        .partitions
        .contains(&"delivery_attempts_20270801".to_string()));
    assert!(!pruned
        .partitions
        .contains(&"delivery_attempts_20270701".to_string()));
    assert_eq!(
        placed_attempts(&mut conn, &history)
            .await
            .iter()
            .map(|p| p.number)
            .collect::<Vec<_>>(),
        vec![2, 4, 5, 6, 7]
    );
    assert_eq!(app.db.attempts(&queued).await.len(), 1);

    // The queue was not touched: the delivery is pending as intake left it, and is
    // claimed as usual (its `claimed` event, stamped with today's date, lands in the
    // DEFAULT partition: those days' partitions were dropped above).
    let row = app.db.delivery(&queued).await;
    assert_eq!((row.state.as_str(), row.attempts), ("pending", 0));
    assert_eq!(deliveries[0].next_attempt_at, row.next_attempt_at);
    let claimed = claim_at(
        &mut conn,
        row.next_attempt_at + chrono::Duration::minutes(1),
        std::time::Duration::from_secs(60),
        10,
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM delivery_events_default WHERE kind = 'claimed'")
            .await,
        1
    );

    // Once it is done, its month goes too.
    conn.batch_execute(&format!(
        "UPDATE webhook_deliveries SET state = 'delivered', claim_token = NULL, \
             claim_expires_at = NULL, attempts = 1, cycle_attempts = 1, completed_at = now() \
         WHERE id = '{queued}'"
    ))
    .await
    .unwrap();
    let pruned = history::prune_history(&app.app.db, HistoryTable::Attempts, cutoff)
        .await
        .unwrap();
    assert_eq!(
        pruned.partitions,
        vec!["delivery_attempts_20270701".to_string()]
    );
    assert!(app.db.attempts(&queued).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_history_of_the_previous_layout_is_partitioned_in_place() {
    let db = TestDb::new().await;
    // Back to the layout before partitioning (migration 31), with the migrations that
    // came after it, however many there are by now.
    let since_31 = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            name.to_string_lossy().as_ref() >= "2026-12-06-000031"
        })
        .count();
    let reverted = db::migrations::revert_newest(&db.url, since_31)
        .await
        .unwrap();
    assert_eq!(reverted.len(), since_31);
    assert!(reverted[since_31 - 1].ends_with("000031"), "{reverted:?}");
    let mut conn = db.connect().await;
    conn.batch_execute(
        "INSERT INTO endpoints (id, name) VALUES ('contact', 'Contact');
         INSERT INTO submissions (id, endpoint_id, received_at, fields)
             VALUES ('sub_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'contact', now() - interval '70 days', '{}');
         INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url,
                 signing_secret, state, attempts, cycle_attempts, next_attempt_at, created_at)
             VALUES ('whd_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'sub_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
                     'contact', 'https://example.com/hook', NULL, 'pending', 3, 3, now(),
                     now() - interval '70 days');
         INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number,
                 destination_url, attempted_at, outcome)
             SELECT 'att_' || repeat(n::text, 32), 'whd_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
                    'sub_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', n, 'https://example.com/hook',
                    now() - (70 - 30 * n) * interval '1 day', 'timeout'
             FROM generate_series(1, 3) n;
         INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state,
                 attempts, cycle_attempts, outcome, occurred_at)
             SELECT 'whd_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'contact', 'created', 'pending', NULL,
                    0, 0, NULL, now() - n * interval '1 day'
             FROM generate_series(1, 5) n;",
    )
    .await
    .unwrap();
    let before = event_ids(&mut conn).await;
    assert_eq!(before.len(), 5);

    let applied = db::migrations::run_pending(&db.url).await.unwrap();
    assert_eq!(applied.len(), reverted.len());

    // The tables are the first partitions, rows and constraints as they were; partitions
    // follow them, and a DEFAULT.
    let events = partitions(&mut conn, "delivery_events").await;
    assert_eq!(events[0].name, "delivery_events_initial");
    assert!(
        events.len() >= 3 && events.last().unwrap().is_default,
        "{events:?}"
    );
    let attempts = names(&mut conn, "delivery_attempts").await;
    assert_eq!(attempts[0], "delivery_attempts_initial");
    assert_eq!(
        db.count("SELECT count(*) AS n FROM delivery_attempts_initial")
            .await,
        3
    );
    assert_eq!(event_ids(&mut conn).await, before);
    // Ids go on from where they were, into the partition of their day.
    insert_events(
        &mut conn,
        "whd_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        1,
        Utc::now(),
    )
    .await;
    let after = event_ids(&mut conn).await;
    assert_eq!(after.len(), 6);
    assert!(after[5] > before[4]);
    // The attempt numbering stays unique in the first partition, under its old name.
    let duplicate = conn
        .batch_execute(
            "INSERT INTO delivery_attempts (id, delivery_id, attempt_number, destination_url,
                 attempted_at, outcome)
             VALUES ('att_dddddddddddddddddddddddddddddddd', 'whd_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
                     2, 'https://example.com/hook', now() - interval '40 days', 'timeout')",
        )
        .await
        .unwrap_err();
    assert!(
        duplicate
            .to_string()
            .contains("delivery_attempts_delivery_number_unique"),
        "{duplicate}"
    );
    // The foreign keys hold across the partitions: erasing the submission keeps its
    // attempts, without it.
    conn.batch_execute("DELETE FROM submissions WHERE id = 'sub_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'")
        .await
        .unwrap();
    assert_eq!(
        db.count("SELECT count(*) AS n FROM delivery_attempts WHERE submission_id IS NULL")
            .await,
        3
    );
    // Nothing past retention yet: the first partition ends after now.
    let (_, pool) = support::harness::pool(&db, None).await;
    let pruned = history::prune_history(
        &pool,
        HistoryTable::Attempts,
        Utc::now() - chrono::Duration::days(1),
    )
    .await
    .unwrap();
    assert!(pruned.partitions.is_empty(), "{pruned:?}");
}
