//! Moving from the earlier Python service: a database it left at Alembic revision 0006
//! (tests/fixtures/python-0.2, made by that service) is refused by a plain `migrate` and by
//! `serve`, taken over by `migrate --adopt`, and then works: its pending deliveries are
//! delivered, its histories keep their numbers, its key authenticates. Other revisions and
//! databases with foreign tables are refused with nothing changed.

use std::io::Write;
use std::process::{Command, Stdio};

use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use serde_json::{json, Value};

use support::harness::{forms_command, wait_for_status, ServeProcess, TestDb};
use support::receiver::Receiver;

const FIXTURE: &str = include_str!("../fixtures/python-0.2/database.sql");
const FIXTURE_KEY: &str = "hym_live_biKp0yLtHe0M8sbNE5Vz30lwObyw9_Z3HxqoBSgTVWI";

/// An empty database with the fixture loaded by psql.
async fn earlier_service_database() -> TestDb {
    let db = TestDb::empty().await;
    let psql = hymical_forms::testing::embedded::find_bin_dir()
        .expect("PostgreSQL binaries")
        .join("psql");
    // psql before 17.6 does not know the dump's \restrict lines; they guard only against a
    // malicious dump, which this is not.
    let script: String = FIXTURE
        .lines()
        .filter(|line| !line.starts_with("\\restrict") && !line.starts_with("\\unrestrict"))
        .map(|line| format!("{line}\n"))
        .collect();
    let mut child = Command::new(psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(db.url.expose())
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("feed psql");
    let output = child.wait_with_output().expect("psql ran");
    assert!(
        output.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    db
}

/// `hymical-forms` with `args` on `db`: (exit code, stdout and stderr).
fn run(db: &TestDb, args: &[&str]) -> (Option<i32>, String) {
    let output = db.run_cli(args);
    (
        output.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[derive(diesel::QueryableByName)]
struct Name {
    #[diesel(sql_type = Text)]
    name: String,
}

/// Every table and constraint, so "nothing changed" can be checked exactly.
async fn schema(db: &TestDb) -> Vec<String> {
    let mut conn = db.connect().await;
    let rows: Vec<Name> = diesel::sql_query(
        "SELECT 'table ' || tablename AS name FROM pg_tables WHERE schemaname = 'public'
         UNION ALL
         SELECT 'constraint ' || conname FROM pg_constraint c
         JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public'
         UNION ALL
         SELECT 'revision ' || version_num FROM alembic_version
         ORDER BY 1",
    )
    .load(&mut conn)
    .await
    .unwrap();
    rows.into_iter().map(|r| r.name).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_of_the_earlier_service_is_adopted_and_keeps_working() {
    let db = earlier_service_database().await;
    let before = schema(&db).await;

    // Without --adopt, nothing touches it, and the message says what to do.
    let (code, said) = run(&db, &["migrate"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("migrate --adopt") && said.contains("0006"),
        "{said}"
    );
    let (code, said) = {
        let dir = tempfile::tempdir().unwrap();
        let output = forms_command(dir.path())
            .env("FORMS_DATABASE_URL", db.url.expose())
            .env("FORMS_AUTO_MIGRATE", "true")
            .env("FORMS_BIND", "127.0.0.1:0")
            .arg("serve")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("migrate --adopt"), "{said}");
    assert_eq!(
        schema(&db).await,
        before,
        "a refused start changed the database"
    );

    let (code, said) = run(&db, &["migrate", "--adopt"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("adopted"), "{said}");
    let (code, said) = run(&db, &["migrate", "--status"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("pending"), "{said}");
    // Adopting twice: nothing left to adopt, and nothing changes.
    let (code, said) = run(&db, &["migrate", "--adopt"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("nothing to adopt"), "{said}");

    // The webhook URLs of the data point where nothing listens: repoint them, and the
    // queued deliveries' snapshots, at a receiver of ours.
    let receiver = Receiver::start().await;
    let mut conn = db.connect().await;
    point_at(
        &mut conn,
        "UPDATE destinations SET url = $1 || substring(url from '/[a-z]+$') WHERE kind = 'webhook'",
        &receiver,
    )
    .await;
    point_at(
        &mut conn,
        "UPDATE webhook_deliveries SET destination_url = $1 || '/status/200' WHERE state = 'pending'",
        &receiver,
    )
    .await;

    let serve = ServeProcess::start(&db, &[("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true")]);
    wait_for_status(&serve.url("/ready"), 200).await;
    // The two deliveries the earlier service queued and never attempted go out.
    let received = receiver.wait_for(2).await;
    let mut emails: Vec<String> = received
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            body["submission"]["fields"]["email"][0]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    emails.sort();
    assert_eq!(emails, ["queued1@example.com", "queued2@example.com"]);
    db.wait_for_deliveries(60, |rows| {
        rows.iter()
            .all(|d| d.state != "pending" && d.state != "processing")
    })
    .await;

    // The earlier key authenticates; the revoked one does not.
    let http = reqwest::Client::new();
    let gql = |key: &str, query: &str, variables: Value| {
        let request = http
            .post(serve.url("/graphql"))
            .bearer_auth(key)
            .json(&json!({ "query": query, "variables": variables }));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let history = "query($id: ID!) { delivery(id: $id) { state attempts cycleAttempts attemptHistory { number outcome httpStatus } } }";
    let replayed_once = "whd_a2c0ffc274bb491eba56f9df2d736596";
    let response = gql(FIXTURE_KEY, history, json!({ "id": replayed_once })).await;
    let delivery = &response["data"]["delivery"];
    assert_eq!(delivery["state"], "FAILED", "{response}");
    assert_eq!(
        (
            delivery["attempts"].as_i64(),
            delivery["cycleAttempts"].as_i64()
        ),
        (Some(4), Some(2))
    );
    assert_eq!(attempt_numbers(delivery), [1, 2, 3, 4], "{response}");
    let counts = gql(
        FIXTURE_KEY,
        "{ deliveryCounts { pending processing delivered failed } }",
        json!({}),
    )
    .await;
    assert_eq!(
        counts["data"]["deliveryCounts"],
        json!({ "pending": 0, "processing": 0, "delivered": 5, "failed": 2 }),
        "{counts}"
    );

    // A replay of the earlier service's failure continues its numbering.
    point_at(
        &mut conn,
        "UPDATE destinations SET url = $1 || '/status/200' WHERE endpoint_id = 'broken-hook'",
        &receiver,
    )
    .await;
    point_at(
        &mut conn,
        &format!(
            "UPDATE webhook_deliveries SET destination_url = $1 || '/status/200' WHERE id = '{replayed_once}'"
        ),
        &receiver,
    )
    .await;
    let replay = gql(
        FIXTURE_KEY,
        "mutation($id: ID!) { replayDelivery(id: $id) { delivery { id } } }",
        json!({ "id": replayed_once }),
    )
    .await;
    assert!(replay["errors"].is_null(), "{replay}");
    db.wait_for_deliveries(60, |rows| {
        rows.iter()
            .any(|d| d.id == replayed_once && d.state == "delivered")
    })
    .await;
    let response = gql(FIXTURE_KEY, history, json!({ "id": replayed_once })).await;
    assert_eq!(
        attempt_numbers(&response["data"]["delivery"]),
        [1, 2, 3, 4, 5],
        "{response}"
    );

    // New submissions on an adopted endpoint are accepted and delivered.
    let response = support::harness::post_urlencoded(
        &http,
        serve.url("/f/contact-form"),
        "email=new%40example.com",
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 202);
    receiver.wait_for(4).await;
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");

    // The revoked key of the earlier service stays revoked.
    let revoked = db
        .count(
            "SELECT count(*) AS n FROM management_api_keys WHERE name = 'revoked-one' AND revoked_at IS NOT NULL",
        )
        .await;
    assert_eq!(revoked, 1);
}

/// The numbers of a GraphQL delivery's `attemptHistory`, in its order.
fn attempt_numbers(delivery: &Value) -> Vec<i64> {
    delivery["attemptHistory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["number"].as_i64().unwrap())
        .collect()
}

/// Runs `update`, whose `$1` is the receiver's base URL: points webhook URLs at it.
async fn point_at(conn: &mut diesel_async::AsyncPgConnection, update: &str, receiver: &Receiver) {
    diesel::sql_query(update)
        .bind::<Text, _>(receiver.url(""))
        .execute(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn other_revisions_and_foreign_tables_are_refused_with_nothing_changed() {
    // (what is changed in the earlier service's database, what the refusal must name)
    for (change, named) in [
        (
            "UPDATE alembic_version SET version_num = '0005'",
            "revision 0005",
        ),
        ("CREATE TABLE invoices (id integer PRIMARY KEY)", "invoices"),
    ] {
        let db = earlier_service_database().await;
        let mut conn = db.connect().await;
        diesel::sql_query(change).execute(&mut conn).await.unwrap();
        let before = schema(&db).await;
        let (code, said) = run(&db, &["migrate", "--adopt"]);
        assert_eq!(code, Some(1), "{said}");
        assert!(
            said.contains(named) && said.contains("Nothing was changed"),
            "{said}"
        );
        assert_eq!(schema(&db).await, before, "{change}");
    }

    // A database of this product has nothing to adopt.
    let ours = TestDb::new().await;
    let (code, said) = run(&ours, &["migrate", "--adopt"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("nothing to adopt"), "{said}");
}
