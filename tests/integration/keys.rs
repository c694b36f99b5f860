//! The management key lifecycle through the CLI.

use std::sync::Arc;

use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use sha2::{Digest, Sha256};

use crate::harness::{forms_command, TestApp, TestDb};

fn run(db: &TestDb, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let output = forms_command(dir.path())
        .env("FORMS_DATABASE_URL", db.url.expose())
        .args(args)
        .output()
        .expect("run hymical-forms");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[derive(diesel::QueryableByName)]
struct Everything {
    #[diesel(sql_type = Text)]
    row: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn create_list_revoke() {
    // A running server and the CLI share one database, so revocation can be seen live.
    let app = TestApp::start_on(TestDb::new().await, &[], Arc::new(SystemClock)).await;
    let db = &app.db;

    let (ok, stdout, stderr) = run(db, &["keys", "create", "--name", "ci dashboard"]);
    assert!(ok, "{stderr}");
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("id:  "))
        .expect("id line")
        .to_string();
    let key = stdout
        .lines()
        .find_map(|l| l.strip_prefix("key: "))
        .expect("key line")
        .to_string();
    assert!(id.starts_with("mk_") && id.len() == 35, "{id}");
    assert!(key.starts_with("hym_live_") && key.len() == 52, "{key}");
    assert_eq!(stdout.matches(&key).count(), 1, "printed once");
    assert!(!stderr.contains(&key), "never logged");

    // The database holds the digest, never the key.
    let mut conn = db.connect().await;
    let rows: Vec<Everything> =
        diesel::sql_query("SELECT row_to_json(k)::text AS row FROM management_api_keys k")
            .load(&mut conn)
            .await
            .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        !rows[0].row.contains(&key[9..]),
        "key stored: {}",
        rows[0].row
    );
    assert!(rows[0]
        .row
        .contains(&hex::encode(Sha256::digest(key.as_bytes()))));

    let (ok, stdout, _) = run(db, &["keys", "list"]);
    assert!(ok);
    let line = stdout.lines().find(|l| l.starts_with(&id)).expect("listed");
    assert!(line.contains(&key[..17]), "prefix shown: {line}");
    assert!(!line.contains(&key[17..]), "rest of key hidden: {line}");
    assert!(
        line.contains("ci dashboard") && line.ends_with("active"),
        "{line}"
    );

    // Revocation is immediate for a running server, idempotent, and keeps the row.
    let bearer = format!("Bearer {key}");
    assert_eq!(app.graphql(Some(&bearer), "{ __typename }").await.0, 200);

    let (ok, stdout, stderr) = run(db, &["keys", "revoke", &id]);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with(&format!("revoked {id}")), "{stdout}");
    let (status, body) = app.graphql(Some(&bearer), "{ __typename }").await;
    assert_eq!(status, 401);
    assert_eq!(body["errors"][0]["extensions"]["code"], "INVALID_API_KEY");

    let (ok, stdout, _) = run(db, &["keys", "revoke", &id]);
    assert!(ok, "revoking twice succeeds");
    assert!(stdout.contains("already revoked"), "{stdout}");

    let (ok, stdout, _) = run(db, &["keys", "list"]);
    assert!(ok);
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .expect("row kept");
    assert!(line.contains("revoked 20"), "{line}");

    let (ok, _, stderr) = run(
        db,
        &["keys", "revoke", "mk_00000000000000000000000000000000"],
    );
    assert!(!ok);
    assert!(stderr.contains("no management key"), "{stderr}");

    let (ok, _, stderr) = run(db, &["keys", "create", "--name", "  "]);
    assert!(!ok);
    assert!(stderr.contains("--name"), "{stderr}");
}
