//! Rate limits shared across processes through the database.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use diesel::sql_types::{Integer, Text};
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::{ManualClock, SystemClock};
use serde_json::Value;
use tokio::sync::Barrier;

use support::harness::{endpoint, TestApp, TestDb};

const FORM: Option<&str> = Some("application/x-www-form-urlencoded");

#[derive(diesel::QueryableByName, Debug, PartialEq)]
struct Counter {
    #[diesel(sql_type = Text)]
    limiter: String,
    #[diesel(sql_type = Text)]
    subject: String,
    #[diesel(sql_type = Integer)]
    attempts: i32,
}

async fn counters(app: &TestApp) -> Vec<Counter> {
    let mut conn = app.db.connect().await;
    diesel::sql_query("SELECT limiter::text, subject::text, attempts FROM rate_limit_counters ORDER BY limiter, subject")
        .load(&mut conn)
        .await
        .unwrap()
}

/// Three servers on one database; `requests` concurrent posts spread over them.
async fn race_three_servers(
    vars: &[(&str, &str)],
    requests: usize,
) -> (Vec<(u16, Value, Option<String>)>, TestApp) {
    let db = TestDb::new().await;
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(Arc::new(
            TestApp::start_on(db.clone(), vars, Arc::new(SystemClock)).await,
        ));
    }
    servers[0].insert_endpoint(&endpoint("contact")).await;
    let barrier = Arc::new(Barrier::new(requests));
    let mut tasks = Vec::new();
    for i in 0..requests {
        let server = servers[i % 3].clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let response = server.post_form("contact", FORM, "a=1", &[]).await;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            (status, response.json::<Value>().await.unwrap(), retry_after)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    drop(servers.split_off(1));
    let first = Arc::try_unwrap(servers.pop().unwrap())
        .ok()
        .expect("sole owner");
    (results, first)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ip_limit_is_exact_across_three_servers() {
    let (results, app) = race_three_servers(
        &[
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "3"),
            ("FORMS_RATE_LIMIT_IP_WINDOW_SECONDS", "3600"),
        ],
        12,
    )
    .await;
    let accepted = results.iter().filter(|(s, _, _)| *s == 202).count();
    assert_eq!(accepted, 3, "{results:?}");
    for (status, body, retry_after) in results.iter().filter(|(s, _, _)| *s != 202) {
        assert_eq!(*status, 429);
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        assert_eq!(body["error"]["details"]["scope"], "ip");
        assert_eq!(body["error"]["details"]["limit"], 3);
        assert_eq!(body["error"]["details"]["window_seconds"], 3600);
        let seconds = body["error"]["details"]["retry_after_seconds"]
            .as_u64()
            .unwrap();
        assert_eq!(retry_after.as_deref(), Some(seconds.to_string().as_str()));
        assert!((1..=3600).contains(&seconds));
    }
    assert_eq!(app.stored_counts().await, (3, 0));
    // Refused attempts count too; the subject is the digest of the address, never it.
    let counters = counters(&app).await;
    let ip: Vec<_> = counters.iter().filter(|c| c.limiter == "ip").collect();
    assert_eq!(ip.len(), 1);
    assert_eq!(ip[0].attempts, 12);
    assert_eq!(
        ip[0].subject,
        hymical_forms::testing::digest::sha256_hex(b"127.0.0.1")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_endpoint_limit_is_exact_across_three_servers() {
    let (results, app) = race_three_servers(
        &[
            ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "3"),
            ("FORMS_RATE_LIMIT_ENDPOINT_WINDOW_SECONDS", "3600"),
        ],
        9,
    )
    .await;
    assert_eq!(
        results.iter().filter(|(s, _, _)| *s == 202).count(),
        3,
        "{results:?}"
    );
    for (status, body, _) in results.iter().filter(|(s, _, _)| *s != 202) {
        assert_eq!(*status, 429);
        assert_eq!(body["error"]["details"]["scope"], "endpoint");
    }
    let counters = counters(&app).await;
    let endpoint_counter = counters.iter().find(|c| c.limiter == "endpoint").unwrap();
    assert_eq!(
        (endpoint_counter.subject.as_str(), endpoint_counter.attempts),
        ("contact", 9)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_source_limit_runs_before_the_endpoint_lookup() {
    // A window of an hour, so that both requests surely fall in the same one.
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "1"),
            ("FORMS_RATE_LIMIT_IP_WINDOW_SECONDS", "3600"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    assert_eq!(
        app.post_form("unknown", FORM, "a=1", &[]).await.status(),
        404
    );
    let response = app.post_form("unknown", FORM, "a=1", &[]).await;
    assert_eq!(response.status(), 429);
    // The endpoint limit counts only requests that reached an existing endpoint.
    assert!(counters(&app).await.iter().all(|c| c.limiter == "ip"));
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_counts_whole_seconds_to_the_window_end() {
    let start = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(
        start + chrono::Duration::milliseconds(20_500),
    ));
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "1"),
            ("FORMS_RATE_LIMIT_IP_WINDOW_SECONDS", "60"),
        ],
        clock.clone(),
    )
    .await;
    app.insert_endpoint(&endpoint("contact")).await;
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &[]).await.status(),
        202
    );
    let refused = app.post_form("contact", FORM, "a=1", &[]).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.headers()["retry-after"],
        "40",
        "39.5 s left rounds up to 40"
    );

    clock.set(start + chrono::Duration::milliseconds(59_999));
    let refused = app.post_form("contact", FORM, "a=1", &[]).await;
    assert_eq!(refused.headers()["retry-after"], "1", "at least one second");

    // The next window starts afresh.
    clock.set(start + chrono::Duration::seconds(60));
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &[]).await.status(),
        202
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forwarded_addresses_with_trusted_hops_and_keyed_digests() {
    let secret = "a-secret-of-at-least-16-chars";
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "1"),
            ("FORMS_RATE_LIMIT_IP_WINDOW_SECONDS", "3600"),
            ("FORMS_TRUSTED_PROXY_HOPS", "1"),
            ("FORMS_RATE_LIMIT_IP_SECRET", secret),
        ],
        Arc::new(SystemClock),
    )
    .await;
    app.insert_endpoint(&endpoint("contact")).await;
    let from = |chain: &'static str| [("x-forwarded-for", chain)];
    // The proxy appended the client's address as the rightmost entry; what the client
    // wrote to the left of it is not trusted.
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &from("6.6.6.6, 203.0.113.1"))
            .await
            .status(),
        202
    );
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &from("7.7.7.7, 203.0.113.1"))
            .await
            .status(),
        429
    );
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &from("203.0.113.2"))
            .await
            .status(),
        202
    );
    // Without the header, the socket peer is the client.
    assert_eq!(
        app.post_form("contact", FORM, "a=1", &[]).await.status(),
        202
    );

    let subjects: Vec<String> = counters(&app)
        .await
        .into_iter()
        .filter(|c| c.limiter == "ip")
        .map(|c| c.subject)
        .collect();
    let keyed = |address: &str| {
        hymical_forms::testing::digest::hmac_sha256_hex(secret.as_bytes(), address.as_bytes())
    };
    let mut expected = vec![
        keyed("203.0.113.1"),
        keyed("203.0.113.2"),
        keyed("127.0.0.1"),
    ];
    expected.sort();
    assert_eq!(subjects, expected);
    for subject in &subjects {
        assert!(!subject.contains("203.0.113"), "never the raw address");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn disabled_limits_count_nothing() {
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "1"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    app.insert_endpoint(&endpoint("contact")).await;
    for _ in 0..3 {
        assert_eq!(
            app.post_form("contact", FORM, "a=1", &[]).await.status(),
            202
        );
    }
    assert!(counters(&app).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_counters_are_swept() {
    let app = TestApp::start().await;
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "INSERT INTO rate_limit_counters VALUES ('ip', 'old', now() - interval '1 hour', 5), ('ip', 'new', now(), 1)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let deleted = hymical_forms::testing::db::rate_limits::sweep(
        &mut conn,
        Utc::now() - chrono::Duration::minutes(5),
    )
    .await
    .unwrap();
    assert_eq!(deleted, 1);
    let left: Vec<String> = counters(&app)
        .await
        .into_iter()
        .map(|c| c.subject)
        .collect();
    assert_eq!(left, ["new"]);
}

/// `count_attempts` against a model of its rules, on a batch that interleaves sources and
/// endpoints, starts from counters other batches left, and crosses limits mid-batch: each
/// request's count is the counter's value after it, a request over its per-source limit
/// is not counted on its endpoint, and the next batch continues from where this one ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_is_counted_request_by_request_in_its_order() {
    use hymical_forms::testing::db::rate_limits::{count_attempts, CountedRequest, Counter};
    use std::collections::HashMap;

    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let window = Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap();
    let other_window = Utc.with_ymd_and_hms(2026, 6, 1, 12, 1, 0).unwrap();
    // Left by earlier batches: source "a" at 2 of its 3, endpoint "e1" at 5.
    diesel::sql_query(
        "INSERT INTO rate_limit_counters (limiter, subject, window_start, attempts) VALUES \
         ('ip', 'a', '2026-06-01T12:00:00Z', 2), ('endpoint', 'e1', '2026-06-01T12:00:00Z', 5)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    type Plan<'a> = [(Option<(&'a str, chrono::DateTime<Utc>)>, Option<&'a str>)];
    let plan: &Plan<'_> = &[
        (Some(("a", window)), Some("e1")),       // a: 3, within; e1: 6
        (Some(("b", window)), Some("e2")),       // b: 1; e2: 1
        (Some(("a", window)), Some("e1")),       // a: 4, over: e1 not counted
        (None, Some("e1")),                      // not counted per source; e1: 7
        (Some(("a", other_window)), Some("e2")), // another window of a: 1; e2: 2
        (Some(("b", window)), None),             // b: 2; no endpoint (not found)
        (Some(("a", window)), Some("e2")),       // a: 5, over
        (Some(("b", window)), Some("e1")),       // b: 3; e1: 8
    ];
    let requests: Vec<CountedRequest<'_>> = plan
        .iter()
        .map(|(source, endpoint)| CountedRequest {
            source: source.map(|(subject, window_start)| {
                (
                    Counter {
                        subject,
                        window_start,
                    },
                    3,
                )
            }),
            endpoint: endpoint.map(|subject| Counter {
                subject,
                window_start: window,
            }),
        })
        .collect();

    // The model: one request at a time, in order.
    type Model = HashMap<(bool, String, chrono::DateTime<Utc>), i64>;
    fn one_by_one(
        model: &mut Model,
        plan: &Plan<'_>,
        window: chrono::DateTime<Utc>,
    ) -> Vec<(Option<i64>, Option<i64>)> {
        let mut count = |per_endpoint: bool, subject: &str, start| {
            let n = model
                .entry((per_endpoint, subject.to_string(), start))
                .or_insert(0);
            *n += 1;
            *n
        };
        plan.iter()
            .map(|(source, endpoint)| {
                let source_count = source.map(|(subject, start)| count(false, subject, start));
                let endpoint_count = match (source_count, endpoint) {
                    (Some(over), _) if over > 3 => None,
                    (_, Some(subject)) => Some(count(true, subject, window)),
                    (_, None) => None,
                };
                (source_count, endpoint_count)
            })
            .collect()
    }
    let mut model: Model = HashMap::from([
        ((false, "a".to_string(), window), 2),
        ((true, "e1".to_string(), window), 5),
    ]);
    let first = one_by_one(&mut model, plan, window);
    assert_eq!(
        first,
        [
            (Some(3), Some(6)),
            (Some(1), Some(1)),
            (Some(4), None),
            (None, Some(7)),
            (Some(1), Some(2)),
            (Some(2), None),
            (Some(5), None),
            (Some(3), Some(8)),
        ]
    );
    // The same batch again continues from the counters the first left.
    let second = one_by_one(&mut model, plan, window);
    for expected in [first, second] {
        let counts = count_attempts(&mut conn, &requests, ("ip", "endpoint"))
            .await
            .unwrap();
        let got: Vec<(Option<i64>, Option<i64>)> =
            counts.iter().map(|c| (c.source, c.endpoint)).collect();
        assert_eq!(got, expected);
    }
}

/// The outbox statement counts its batch as its last step: within every limit it writes
/// the submissions and adds to the counters together; should a counter end over its
/// limit, it refuses as a whole, and neither a submission nor a count is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn the_outbox_statement_counts_its_batch_or_writes_nothing() {
    use hymical_forms::testing::db::rate_limits::{BatchCounters, Counter};
    use hymical_forms::testing::db::submissions::{insert_batch, IntakeClaim, NewSubmission};
    use hymical_forms::testing::model::ids::{DeliveryId, EndpointId, SubmissionId};

    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let row = endpoint("counted");
    hymical_forms::testing::db::endpoints::insert(
        &mut conn,
        &row,
        support::harness::webhook(
            &row,
            "https://example.com/hook",
            support::harness::webhook_secret(),
        ),
    )
    .await
    .unwrap();
    let window = Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap();
    let submission = || NewSubmission {
        id: SubmissionId::generate(),
        endpoint_id: EndpointId::parse("counted").unwrap(),
        received_at: Utc::now(),
        fields: serde_json::json!({"n": ["1"]}),
        idempotency: None,
        delivery_id: DeliveryId::generate(),
        claim_token: None,
        spam_reasons: None,
        files: Vec::new(),
        trace_parent: None,
    };
    // Per request: its source and the endpoint, the source's limit 3, the endpoint's 2.
    let counted = |sources: &[&'static str]| {
        BatchCounters::every_request(
            sources.iter().map(|source| {
                [
                    Some((
                        Counter {
                            subject: source,
                            window_start: window,
                        },
                        3,
                    )),
                    Some((
                        Counter {
                            subject: "counted",
                            window_start: window,
                        },
                        2,
                    )),
                ]
            }),
            ("ip", "endpoint"),
        )
    };
    let state = |db: TestDb| async move {
        (
            db.count("SELECT count(*) AS n FROM submissions").await,
            db.count("SELECT count(*) AS n FROM webhook_deliveries").await,
            db.count("SELECT count(*) AS n FROM delivery_events").await,
            db.count("SELECT coalesce(sum(attempts), 0)::bigint AS n FROM rate_limit_counters WHERE limiter = 'ip'")
                .await,
            db.count("SELECT coalesce(sum(attempts), 0)::bigint AS n FROM rate_limit_counters WHERE limiter = 'endpoint'")
                .await,
        )
    };

    // Three requests to an endpoint limited to 2: refused, nothing written, nothing counted.
    let (a, b, c) = (submission(), submission(), submission());
    let error = insert_batch(
        &mut conn,
        &[&a, &b, &c],
        None,
        IntakeClaim::NONE,
        &counted(&["x", "x", "y"]),
    )
    .await
    .err()
    .expect("over the endpoint's limit");
    assert!(error.exceeds_rate_limit(), "{error:?}");
    assert_eq!(state(db.clone()).await, (0, 0, 0, 0, 0));

    // Two: written and counted together (the first with an idempotency key).
    let a = NewSubmission {
        idempotency: Some(("key-1".into(), "f".repeat(64))),
        ..a
    };
    let written = insert_batch(
        &mut conn,
        &[&a, &b],
        None,
        IntakeClaim::NONE,
        &counted(&["x", "x"]),
    )
    .await
    .unwrap();
    assert_eq!(written.len(), 2);
    assert!(written.iter().all(|w| w.delivery_queued));
    assert_eq!(state(db.clone()).await, (2, 2, 2, 2, 2));
    // Each counter records the limit it was last checked against (for whoever reads the row).
    assert_eq!(
        db.count(
            "SELECT attempt_limit::bigint AS n FROM rate_limit_counters WHERE limiter = 'endpoint'"
        )
        .await,
        2
    );

    // One more: the endpoint's counter would reach 3 of 2. Refused; the two stay as they were.
    let error = insert_batch(&mut conn, &[&c], None, IntakeClaim::NONE, &counted(&["y"]))
        .await
        .err()
        .expect("over the endpoint's limit");
    assert!(error.exceeds_rate_limit(), "{error:?}");
    assert_eq!(state(db.clone()).await, (2, 2, 2, 2, 2));

    // A batch whose every submission loses its idempotency race (it writes no row) is
    // still counted and checked: refused all the same.
    let again = NewSubmission {
        idempotency: Some(("key-1".into(), "0".repeat(64))),
        ..submission()
    };
    let error = insert_batch(
        &mut conn,
        &[&again],
        None,
        IntakeClaim::NONE,
        &counted(&["y"]),
    )
    .await
    .err()
    .expect("over the endpoint's limit, with no row written");
    assert!(error.exceeds_rate_limit(), "{error:?}");
    assert_eq!(state(db.clone()).await, (2, 2, 2, 2, 2));

    // Any other refusal is not mistaken for a limit: an unknown endpoint.
    let mut lost = submission();
    lost.endpoint_id = EndpointId::parse("no-such-endpoint").unwrap();
    let error = insert_batch(
        &mut conn,
        &[&lost],
        None,
        IntakeClaim::NONE,
        &BatchCounters::default(),
    )
    .await
    .err()
    .expect("no such endpoint");
    assert!(!error.exceeds_rate_limit(), "{error:?}");
    assert!(error.violates_foreign_key("submissions_endpoint_id_fkey"));
}

/// The outbox statement locks a batch's counters in the order the server sorts them,
/// and the counting statement in `ORDER BY subject COLLATE "C"`: the two orders must
/// agree for any subjects (ids with `-` and `_`, upper case, non-ASCII digests of
/// forwarded entries), or two batches could wait on each other's counters.
#[tokio::test(flavor = "multi_thread")]
async fn both_statements_order_counters_alike() {
    use hymical_forms::testing::db::rate_limits::{BatchCounters, Counter};

    #[derive(diesel::QueryableByName)]
    struct Subject {
        #[diesel(sql_type = Text)]
        subject: String,
    }
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let window = Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap();
    let subjects = [
        "shop_a", "shop2", "Shop", "shop-b", "a-b", "ab", "é", "z", "A_1", "a1",
    ];
    let batch = BatchCounters::every_request(
        subjects.iter().map(|subject| {
            [
                Some((
                    Counter {
                        subject,
                        window_start: window,
                    },
                    1,
                )),
                None,
            ]
        }),
        ("ip", "endpoint"),
    );
    let sorted: Vec<Subject> = diesel::sql_query(
        "SELECT s AS subject FROM unnest($1::varchar[]) s ORDER BY s COLLATE \"C\"",
    )
    .bind::<diesel::sql_types::Array<Text>, _>(&subjects[..])
    .load(&mut conn)
    .await
    .unwrap();
    let sorted: Vec<&str> = sorted.iter().map(|s| s.subject.as_str()).collect();
    assert_eq!(batch.subjects, sorted);
}
