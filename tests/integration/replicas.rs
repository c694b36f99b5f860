//! Read replicas against a real streaming standby: a primary of this module's own and a
//! standby made from it by `pg_basebackup`, streaming, both with `pg_stat_statements`, so
//! each server tells which statements it ran. A test's database is cloned on the primary
//! and reaches the standby by replay.
//!
//! - GraphQL queries (listings, details, counts) and exports run on the standby;
//! - past the lag allowed (replay paused while the primary writes) they run on the
//!   primary, the metrics show the lag, and once replay resumes they return to the standby;
//! - a key revoked on the primary is refused at once though the standby still has it;
//! - a subscription's catch-up reads the standby only once it has replayed through the
//!   frontier's position, and the primary otherwise.
//!
//! The standby's replay is paused by some tests, so they take turns.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use diesel::sql_types::Text;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use futures_util::StreamExt;
use hymical_forms::testing::clock::SystemClock;
use hymical_forms::testing::config::Secret;
use hymical_forms::testing::db;
use hymical_forms::testing::db::events::EventFilter;
use hymical_forms::testing::embedded;
use serde_json::json;

use crate::metrics::{samples, scrape, value};
use support::harness::{database_url, endpoint, TestApp, TestDb};

struct Pair {
    primary: Secret,
    standby: Secret,
    template: String,
    _servers: Vec<embedded::RunningServer>,
}

static PAIR: OnceLock<Pair> = OnceLock::new();

/// One test at a time: pausing replay pauses it for everyone.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn pair() -> &'static Pair {
    PAIR.get_or_init(|| {
        std::thread::spawn(start_pair)
            .join()
            .expect("the primary and standby failed to start")
    })
}

fn settings() -> embedded::ServerSettings {
    let mut settings = embedded::ServerSettings::throwaway();
    settings.extra.push((
        "shared_preload_libraries".into(),
        "pg_stat_statements".into(),
    ));
    settings
}

fn running(started: embedded::Started) -> embedded::RunningServer {
    match started {
        embedded::Started::ByUs(running) => running,
        embedded::Started::AlreadyRunning => panic!("a fresh cluster was already running"),
    }
}

fn start_pair() -> Pair {
    let root = std::env::temp_dir().join(format!(
        "hymical-replicas-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let primary = embedded::Cluster::new(&root.join("primary")).expect("server binaries");
    primary
        .hand_root_to_server_user()
        .expect("primary directory");
    primary.initialize().expect("initdb");
    let (started, connection) = primary
        .ensure_running(&settings())
        .expect("start the primary");
    let primary_server = running(started);
    let primary_url = connection.url("postgres");
    let template = format!("replica_template_{}", uuid::Uuid::new_v4().simple());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        execute(&primary_url, &format!("CREATE DATABASE {template}")).await;
        let url = database_url(&primary_url, &template);
        db::migrations::run_pending(&url)
            .await
            .expect("migrate the template");
        execute(&url, "CREATE EXTENSION pg_stat_statements").await;
    });
    let standby = primary
        .standby_at(&connection, &root.join("standby"))
        .expect("pg_basebackup");
    let (started, standby_connection) = standby
        .ensure_running(&settings())
        .expect("start the standby");
    Pair {
        primary: primary_url,
        standby: standby_connection.url("postgres"),
        template,
        // The standby first: it stops before its primary.
        _servers: vec![running(started), primary_server],
    }
}

async fn execute(url: &Secret, sql: &str) {
    let mut connection = AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect");
    diesel::sql_query(sql)
        .execute(&mut connection)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

#[derive(diesel::QueryableByName)]
struct Number {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

async fn number(url: &Secret, sql: &str, bind: &str) -> i64 {
    let mut connection = AsyncPgConnection::establish(url.expose())
        .await
        .expect("connect");
    diesel::sql_query(sql)
        .bind::<Text, _>(bind)
        .get_result::<Number>(&mut connection)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
        .n
}

/// One test's database on the primary, replayed onto the standby.
struct Databases {
    primary: Secret,
    standby: Secret,
    name: String,
}

impl Databases {
    async fn new() -> Databases {
        let pair = pair();
        let name = format!("replica_test_{}", uuid::Uuid::new_v4().simple());
        execute(
            &pair.primary,
            &format!("CREATE DATABASE {name} TEMPLATE {}", pair.template),
        )
        .await;
        // A test before this one may have failed with replay paused.
        execute(&pair.standby, "SELECT pg_wal_replay_resume()").await;
        let databases = Databases {
            primary: database_url(&pair.primary, &name),
            standby: database_url(&pair.standby, &name),
            name,
        };
        databases.replayed().await;
        databases
    }

    /// Waits (at most 60 s) until the standby has replayed all the primary has now.
    async fn replayed(&self) {
        let pair = pair();
        let position = number(
            &pair.primary,
            "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS n WHERE $1 = $1",
            "",
        )
        .await;
        for _ in 0..1_200 {
            let replayed = number(
                &pair.standby,
                "SELECT coalesce((pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint, -1) AS n WHERE $1 = $1",
                "",
            )
            .await;
            if replayed >= position {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the standby did not replay the primary's log within 60 s");
    }

    async fn pause_replay(&self) {
        execute(&pair().standby, "SELECT pg_wal_replay_pause()").await;
    }

    async fn resume_replay(&self) {
        execute(&pair().standby, "SELECT pg_wal_replay_resume()").await;
    }

    /// An app on the primary with the standby as its read replica.
    async fn app(&self, max_lag: &str) -> TestApp {
        let vars = [
            ("FORMS_DATABASE_URL", self.primary.expose()),
            ("FORMS_DATABASE_READ_URL", self.standby.expose()),
            ("FORMS_DATABASE_READ_MAX_LAG_SECONDS", max_lag),
        ];
        TestApp::start_on(
            TestDb::external(&self.name, self.primary.clone()),
            &vars,
            Arc::new(SystemClock),
        )
        .await
    }
}

/// The calls of the statements whose text matches `pattern` that `url`'s server ran in
/// its database (reads only: the writes of intake are not counted).
async fn ran(url: &Secret, pattern: &str) -> i64 {
    number(
        url,
        "SELECT coalesce(sum(calls), 0)::bigint AS n FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND query ILIKE $1 AND query NOT ILIKE '%pg_stat_statements%' \
           AND query NOT ILIKE '%insert%'",
        pattern,
    )
    .await
}

const SUBMISSIONS: &str = "%submissions%";
const DELIVERY_COUNTS: &str = "%webhook_deliveries%";
const EVENTS: &str = "%delivery_events%";

/// The statements of `pattern` each server ran while `work` ran: (primary, standby).
async fn ran_during<T>(
    databases: &Databases,
    pattern: &str,
    work: impl std::future::Future<Output = T>,
) -> (T, i64, i64) {
    let (primary, standby) = (
        ran(&databases.primary, pattern).await,
        ran(&databases.standby, pattern).await,
    );
    let answer = work.await;
    (
        answer,
        ran(&databases.primary, pattern).await - primary,
        ran(&databases.standby, pattern).await - standby,
    )
}

/// Waits (at most 30 s) until the monitor lets reads go to the replica, or not.
async fn until_serving(app: &TestApp, serving: bool) {
    let replica = app.app.replica.as_ref().expect("a replica");
    for _ in 0..600 {
        if replica.serving() == serving {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the replica's monitor never said serving = {serving}");
}

async fn metrics(app: &TestApp, key: &str) -> std::collections::HashMap<String, f64> {
    let (status, _, text) = scrape(&app.url("/metrics"), Some(key)).await;
    assert_eq!(status, 200);
    samples(&text)
}

fn reads(samples: &std::collections::HashMap<String, f64>, read: &str, by: &str) -> f64 {
    value(
        samples,
        &format!("hymical_replica_reads_total{{read=\"{read}\",served_by=\"{by}\"}}"),
    )
}

const LISTING: &str = "query($endpoint: ID!, $id: ID!) {
    submissions(first: 10, filter: { endpointId: $endpoint }) { nodes { id } }
    submission(id: $id) { id }
    deliveryCounts(endpointId: $endpoint) { pending }
}";

fn listed(answer: &serde_json::Value) -> usize {
    answer["data"]["submissions"]["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .len()
}

#[tokio::test(flavor = "multi_thread")]
async fn queries_and_exports_are_served_by_the_standby() {
    let _turn = TURN.lock().await;
    let databases = Databases::new().await;
    let app = databases.app("3600").await;
    let (_, key) = app.create_key("admin").await;
    app.webhook_endpoint("replicated", "https://receiver.example/hook")
        .await;
    let first = app.submit("replicated", "name=Ada").await;
    app.submit("replicated", "name=Grace").await;
    databases.replayed().await;
    until_serving(&app, true).await;
    let before = metrics(&app, &key).await;

    let variables = json!({ "endpoint": "replicated", "id": first });
    let (answer, on_primary, on_standby) = ran_during(
        &databases,
        SUBMISSIONS,
        app.gql(&key, LISTING, variables.clone()),
    )
    .await;
    assert_eq!(listed(&answer), 2, "{answer}");
    assert_eq!(answer["data"]["submission"]["id"], first.as_str());
    assert_eq!(answer["data"]["deliveryCounts"]["pending"], 2);
    assert_eq!(on_primary, 0, "the primary ran the listing");
    assert!(
        on_standby >= 2,
        "the listing and the detail ran on the standby"
    );
    let (_, on_primary, on_standby) = ran_during(
        &databases,
        DELIVERY_COUNTS,
        app.gql(&key, LISTING, variables),
    )
    .await;
    assert_eq!(on_primary, 0, "the primary ran the counts");
    assert!(on_standby >= 1, "the counts ran on the standby");

    let export = async {
        let response = app
            .http
            .get(app.url("/submissions/export?endpoint_id=replicated&format=json"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    };
    let (body, on_primary, on_standby) = ran_during(&databases, SUBMISSIONS, export).await;
    assert!(body.contains(&first), "{body}");
    assert_eq!(on_primary, 0, "the primary ran the export");
    assert!(on_standby >= 1, "the export ran on the standby");

    // The standby knows the service's read connections by their name.
    let named = number(
        &databases.standby,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1",
        "hymical-forms-read",
    )
    .await;
    assert!(
        named >= 1,
        "no connection named hymical-forms-read on the standby"
    );
    let after = metrics(&app, &key).await;
    assert_eq!(value(&after, "hymical_replica_serving{}"), 1.0);
    assert!(reads(&after, "graphql", "replica") >= reads(&before, "graphql", "replica") + 2.0);
    assert!(reads(&after, "export", "replica") >= reads(&before, "export", "replica") + 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_lag_reads_go_to_the_primary_until_replay_catches_up() {
    let _turn = TURN.lock().await;
    let databases = Databases::new().await;
    let app = databases.app("1").await;
    let (_, key) = app.create_key("admin").await;
    app.insert_endpoint(&endpoint("paused")).await;
    let first = app.submit("paused", "name=Ada").await;
    databases.replayed().await;
    until_serving(&app, true).await;
    let variables = json!({ "endpoint": "paused", "id": first });

    databases.pause_replay().await;
    // The standby never sees this one while paused: a listing that shows it was read on
    // the primary.
    app.submit("paused", "name=Grace").await;
    until_serving(&app, false).await;
    let (answer, on_primary, on_standby) = ran_during(
        &databases,
        SUBMISSIONS,
        app.gql(&key, LISTING, variables.clone()),
    )
    .await;
    assert_eq!(listed(&answer), 2, "{answer}");
    assert!(on_primary >= 2, "the primary did not run the listing");
    assert_eq!(on_standby, 0, "the paused standby ran the listing");
    let lagging = metrics(&app, &key).await;
    assert_eq!(value(&lagging, "hymical_replica_serving{}"), 0.0);
    assert!(
        value(&lagging, "hymical_replica_lag_seconds{}") > 1.0,
        "{lagging:?}"
    );
    assert!(value(&lagging, "hymical_replica_lag_bytes{}") > 0.0);

    databases.resume_replay().await;
    until_serving(&app, true).await;
    let (answer, on_primary, on_standby) =
        ran_during(&databases, SUBMISSIONS, app.gql(&key, LISTING, variables)).await;
    assert_eq!(listed(&answer), 2, "{answer}");
    assert_eq!(
        on_primary, 0,
        "the primary ran the listing after replay resumed"
    );
    assert!(on_standby >= 2, "the standby did not take the reads back");
    assert_eq!(
        value(&metrics(&app, &key).await, "hymical_replica_serving{}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_revoked_on_the_primary_is_refused_while_the_standby_still_has_it() {
    let _turn = TURN.lock().await;
    let databases = Databases::new().await;
    let app = databases.app("3600").await;
    let (_, key) = app.create_key("stays").await;
    let (revoked_id, revoked) = app.create_key("revoked").await;
    app.insert_endpoint(&endpoint("keys")).await;
    let first = app.submit("keys", "name=Ada").await;
    databases.replayed().await;
    until_serving(&app, true).await;

    databases.pause_replay().await;
    execute(
        &databases.primary,
        &format!("UPDATE management_api_keys SET revoked_at = now() WHERE id = '{revoked_id}'"),
    )
    .await;
    let (status, answer) = app
        .graphql(Some(&format!("Bearer {revoked}")), "{ version }")
        .await;
    assert_eq!(status, 401, "{answer}");
    // The standby still holds the key unrevoked, and is within its lag: reads still go to
    // it, the key lookups do not.
    let still_there = number(
        &databases.standby,
        "SELECT count(*) AS n FROM management_api_keys WHERE id = $1 AND revoked_at IS NULL",
        &revoked_id,
    )
    .await;
    assert_eq!(still_there, 1);
    let variables = json!({ "endpoint": "keys", "id": first });
    let (answer, _, on_standby) =
        ran_during(&databases, SUBMISSIONS, app.gql(&key, LISTING, variables)).await;
    assert_eq!(listed(&answer), 1, "{answer}");
    assert!(on_standby >= 1);
    // A mutation's answer is read where it wrote: the primary.
    let created = app
        .gql(
            &key,
            "mutation { createEndpoint(input: { id: \"written\", name: \"Written\" }) { endpoint { id name } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        created["data"]["createEndpoint"]["endpoint"]["name"], "Written",
        "{created}"
    );
    databases.resume_replay().await;
}

/// Collects `count` events of a stream, within 30 s.
async fn events(
    stream: impl futures_util::Stream<
        Item = Result<db::models::EventRow, hymical_forms::testing::feed::FeedError>,
    >,
    count: usize,
) -> Vec<i64> {
    let stream = std::pin::pin!(stream);
    tokio::time::timeout(
        Duration::from_secs(30),
        stream
            .take(count)
            .map(|event| event.expect("event").id)
            .collect(),
    )
    .await
    .expect("the events within 30 s")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_catch_up_reads_the_standby_only_once_it_has_replayed_its_frontier() {
    let _turn = TURN.lock().await;
    let databases = Databases::new().await;
    let app = databases.app("3600").await;
    let (_, key) = app.create_key("admin").await;
    app.webhook_endpoint("history", "https://receiver.example/hook")
        .await;
    for name in ["Ada", "Grace", "Edsger"] {
        app.submit("history", &format!("name={name}")).await;
    }
    until_serving(&app, true).await;
    let feed = app.app.events.clone();
    let primary = app.app.graphql_db.clone();

    // A subscriber from now on keeps the feed's frontier (three events) where it is.
    let (started, frontier) = tokio::sync::oneshot::channel();
    let (live_sender, mut live) = tokio::sync::mpsc::unbounded_channel();
    let listener = feed.subscribe(primary.clone(), EventFilter::default(), None, move |at| {
        let _ = started.send(at);
    });
    let listening = tokio::spawn(async move {
        let mut listener = std::pin::pin!(listener);
        while let Some(Ok(event)) = listener.next().await {
            if live_sender.send(event.id).is_err() {
                break;
            }
        }
    });
    let frontier = frontier.await.expect("the feed started");
    databases.replayed().await;

    // The standby has replayed past the frontier's position: the history comes from it.
    let before = metrics(&app, &key).await;
    let history = feed.subscribe(primary.clone(), EventFilter::default(), Some(0), |_| {});
    let (ids, _, on_standby) = ran_during(&databases, EVENTS, events(history, 3)).await;
    assert_eq!(ids.len(), 3);
    assert_eq!(*ids.last().unwrap(), frontier);
    assert!(on_standby >= 1, "the catch-up did not read the standby");
    let after = metrics(&app, &key).await;
    assert_eq!(
        reads(&after, "catch_up", "replica"),
        reads(&before, "catch_up", "replica") + 1.0
    );

    // Replay paused, two more events: the frontier moves past what the standby has.
    databases.pause_replay().await;
    for name in ["Barbara", "Donald"] {
        app.submit("history", &format!("name={name}")).await;
    }
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(30), live.recv())
            .await
            .expect("the live events")
            .expect("the listener runs");
    }
    let history = feed.subscribe(primary, EventFilter::default(), Some(0), |_| {});
    let (ids, _, on_standby) = ran_during(&databases, EVENTS, events(history, 5)).await;
    assert_eq!(
        ids.len(),
        5,
        "the history the standby lacks came from the primary"
    );
    assert_eq!(
        on_standby, 0,
        "the catch-up read the standby behind its frontier"
    );
    let later = metrics(&app, &key).await;
    assert_eq!(
        reads(&later, "catch_up", "primary"),
        reads(&after, "catch_up", "primary") + 1.0
    );
    databases.resume_replay().await;
    listening.abort();
}
