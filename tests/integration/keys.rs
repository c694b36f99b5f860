//! The management key lifecycle through the CLI.

use std::sync::Arc;

use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use sha2::{Digest, Sha256};

use support::harness::{TestApp, TestDb};

fn run(db: &TestDb, args: &[&str]) -> (bool, String, String) {
    let output = db.run_cli(args);
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

/// Every mutation field the schema has, read from the SDL the code builds: a mutation added
/// later is walked here without anyone remembering to.
fn schema_mutations() -> Vec<String> {
    let sdl = hymical_forms::testing::graphql::sdl();
    let start = sdl.find("type Mutation {").expect("a Mutation type");
    let body = &sdl[start..];
    let body = &body[..body.find("\n}").expect("its end")];
    body.lines()
        .skip(1)
        .filter_map(|line| {
            let line = line.trim();
            // Field definitions start with a name; descriptions are quoted.
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty() && line[name.len()..].starts_with(['(', ':'])).then_some(name)
        })
        .collect()
}

/// A `read` key (`keys create --role read`) runs queries and subscriptions, and is refused
/// every mutation of the schema (walked from the SDL), over HTTP and WebSocket, and every
/// export, with `INSUFFICIENT_ROLE` and 403, before anything runs. `keys list` shows roles.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_key_reads_and_changes_nothing() {
    use hymical_forms::testing::model::state::KeyRole;
    let app = TestApp::start_on(TestDb::new().await, &[], Arc::new(SystemClock)).await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;
    let (_, admin) = app.create_key_with_role("ops", KeyRole::Admin).await;

    let (ok, stdout, stderr) = run(
        &app.db,
        &["keys", "create", "--name", "dashboard", "--role", "read"],
    );
    assert!(ok, "{stderr}");
    let key = stdout
        .lines()
        .find_map(|l| l.strip_prefix("key: "))
        .expect("key line")
        .to_string();
    assert!(stdout.contains("role: read"), "{stdout}");
    let (ok, _, stderr) = run(
        &app.db,
        &["keys", "create", "--name", "x", "--role", "root"],
    );
    assert!(!ok && stderr.contains("admin or read"), "{stderr}");
    let (_, listing, _) = run(&app.db, &["keys", "list"]);
    let line = listing
        .lines()
        .find(|l| l.contains("dashboard"))
        .expect("listed");
    assert!(line.contains(" read "), "{line}");
    assert!(listing.lines().next().unwrap_or_default().contains("ROLE"));
    let bearer = format!("Bearer {key}");

    // Queries: yes, and the key knows its role.
    let (status, body) = app
        .graphql(
            Some(&bearer),
            "{ apiKey { name role } endpoints { nodes { id } } deliveryCounts { pending } }",
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["apiKey"]["role"], "READ", "{body}");
    assert_eq!(body["data"]["endpoints"]["nodes"][0]["id"], "contact");

    // Every mutation: no, before its arguments are even looked at.
    let mutations = schema_mutations();
    assert!(mutations.len() >= 10, "{mutations:?}");
    assert!(mutations.contains(&"deleteEndpoint".to_string()));
    for mutation in &mutations {
        let document = format!("mutation {{ {mutation} }}");
        let (status, body) = app.graphql(Some(&bearer), &document).await;
        assert_eq!(status, 403, "{mutation}: {body}");
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "INSUFFICIENT_ROLE",
            "{mutation}: {body}"
        );
        assert!(body.get("data").is_none(), "{mutation}: {body}");
        // The same document with an admin key reaches validation (it lacks its arguments
        // and selection): the refusal above was the role's.
        let (_, body) = app
            .graphql(Some(&format!("Bearer {admin}")), &document)
            .await;
        assert_ne!(
            body["errors"][0]["extensions"]["code"], "INSUFFICIENT_ROLE",
            "{mutation}: {body}"
        );
    }
    // A well-formed, named mutation among queries changes nothing either.
    let (status, body) = app
        .graphql(
            Some(&bearer),
            r#"query Q { version } mutation Delete { deleteEndpoint(input: { id: "contact", history: ERASE }) { deletedEndpointId } }"#,
        )
        .await;
    assert_eq!(
        status, 200,
        "without an operation name nothing runs: {body}"
    );
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("authorization", &bearer)
        .json(&serde_json::json!({
            "query": r#"query Q { version } mutation Delete { deleteEndpoint(input: { id: "contact", history: ERASE }) { deletedEndpointId } }"#,
            "operationName": "Delete",
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let (_, body) = app
        .graphql(Some(&bearer), r#"{ endpoint(id: "contact") { id } }"#)
        .await;
    assert_eq!(body["data"]["endpoint"]["id"], "contact", "still there");

    // Over WebSocket: subscriptions yes, mutations no (the connection stays open).
    let url = format!("ws://{}/graphql/ws", app.addr);
    let mut client = support::ws_client::WsClient::ready(&url, &key).await;
    client
        .send(
            serde_json::json!({ "type": "subscribe", "id": "m", "payload": {
            "query": r#"mutation { pauseEndpoint(endpointId: "contact") { endpoint { id } } }"#
        } }),
        )
        .await;
    let refused = client.next_json().await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["payload"][0]["extensions"]["code"],
        "INSUFFICIENT_ROLE"
    );
    client.subscribe_events("live", "").await;
    client.send(serde_json::json!({ "type": "ping" })).await;
    assert_eq!(client.next_non_ka().await["type"], "pong");

    // Exports: no.
    let export = app
        .http
        .get(app.url("/submissions/export?format=json"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 403);
    let body: serde_json::Value = export.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_role", "{body}");
    let export = app
        .http
        .get(app.url("/submissions/export?format=json"))
        .header("authorization", format!("Bearer {admin}"))
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 200);
}

/// `keys create --project` makes a key of one project (refused for an unknown one), and
/// `keys list` shows each key's project.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_makes_a_key_of_one_project() {
    let app = TestApp::start().await;
    let db = &app.db;
    let default = "prj_00000000000000000000000000000000";
    let (ok, stdout, stderr) = run(
        db,
        &["keys", "create", "--name", "team", "--project", default],
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains(&format!("project: {default}")), "{stdout}");
    let id = stdout
        .lines()
        .find_map(|line| line.strip_prefix("id:"))
        .unwrap()
        .trim()
        .to_string();
    let (_, listing, _) = run(db, &["keys", "list"]);
    let line = listing.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(line.contains(default), "{line}");
    // On the audit trail, under the command line, in the default project.
    let (ok, _, stderr) = run(db, &["keys", "revoke", &id]);
    assert!(ok, "{stderr}");
    for operation in ["keys create", "keys revoke"] {
        let entries = db
            .count(&format!(
                "SELECT count(*) AS n FROM audit_entries WHERE operation = '{operation}' AND key_id = 'cli' AND '{id}' = ANY(targets) AND project_id = '{default}'"
            ))
            .await;
        assert_eq!(entries, 1, "{operation}");
    }
    let (ok, _, stderr) = run(
        db,
        &[
            "keys",
            "create",
            "--name",
            "x",
            "--project",
            "prj_00000000000000000000000000000001",
        ],
    );
    assert!(!ok);
    assert!(stderr.contains("--project"), "{stderr}");
}
