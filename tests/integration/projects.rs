//! Projects and scoped keys: a key of one project sees and touches nothing of another,
//! answering every query, mutation, subscription and export exactly as for an unknown id;
//! keys are made, renamed, expired and revoked through the API; a key of a deleted
//! project stops working; an installation's endpoints and keys are in the default project.

use std::time::Duration;

use serde_json::{json, Value};

use support::harness::{data, TestApp};
use support::receiver::Receiver;
use support::smtp_server::SmtpServer;
use support::ws_client::WsClient;

/// Ids of the same shapes as project A's, which nothing has.
const UNKNOWN_ENDPOINT: &str = "nosuch";
const UNKNOWN_DESTINATION: &str = "dst_00000000000000000000000000000001";
const UNKNOWN_SUBMISSION: &str = "sub_00000000000000000000000000000001";
const UNKNOWN_DELIVERY: &str = "whd_00000000000000000000000000000001";
const UNKNOWN_KEY: &str = "mk_00000000000000000000000000000001";
const UNKNOWN_PROJECT: &str = "prj_00000000000000000000000000000001";
const UNKNOWN_PERSON: &str = "nobody@example.com";

/// What project A holds, as its ids.
struct Held {
    endpoint: String,
    destination: String,
    submission: String,
    delivery: String,
    key: String,
    project: String,
    person: String,
}

impl Held {
    fn unknown() -> Held {
        Held {
            endpoint: UNKNOWN_ENDPOINT.into(),
            destination: UNKNOWN_DESTINATION.into(),
            submission: UNKNOWN_SUBMISSION.into(),
            delivery: UNKNOWN_DELIVERY.into(),
            key: UNKNOWN_KEY.into(),
            project: UNKNOWN_PROJECT.into(),
            person: UNKNOWN_PERSON.into(),
        }
    }

    /// `template` with `{EP}`, `{DST}`, `{SUB}`, `{DLV}`, `{KEY}`, `{PRJ}`, `{PERSON}`
    /// filled in.
    fn fill(&self, template: &str) -> String {
        template
            .replace("{EP}", &self.endpoint)
            .replace("{DST}", &self.destination)
            .replace("{SUB}", &self.submission)
            .replace("{DLV}", &self.delivery)
            .replace("{KEY}", &self.key)
            .replace("{PRJ}", &self.project)
            .replace("{PERSON}", &self.person)
    }

    /// `answer` with these ids put back as placeholders, so that two answers about
    /// different ids compare.
    fn unfill(&self, answer: &Value) -> String {
        answer
            .to_string()
            .replace(&self.endpoint, "{EP}")
            .replace(&self.destination, "{DST}")
            .replace(&self.submission, "{SUB}")
            .replace(&self.delivery, "{DLV}")
            .replace(&self.key, "{KEY}")
            .replace(&self.project, "{PRJ}")
            .replace(&self.person, "{PERSON}")
    }
}

/// Every query and mutation that names something of a project, as project B's admin key
/// sends it about project A's things.
const OPERATIONS: &[&str] = &[
    // Queries.
    r#"{ endpoint(id: "{EP}") { id name } }"#,
    r#"{ submission(id: "{SUB}") { id fields { name values } } }"#,
    r#"{ delivery(id: "{DLV}") { id state } }"#,
    r#"{ submissions(filter: { endpointId: "{EP}", folder: ALL }) { nodes { id } } }"#,
    r#"{ submissions(filter: { value: "{PERSON}", folder: ALL }) { nodes { id } } }"#,
    r#"{ deliveries(filter: { endpointId: "{EP}" }) { nodes { id } } }"#,
    r#"{ deliveries(filter: { destinationId: "{DST}" }) { nodes { id } } }"#,
    r#"{ deliveryCounts(endpointId: "{EP}") { pending processing delivered failed } }"#,
    r#"{ deliveryActivity(endpointId: "{EP}", minutes: 5) { delivered failed } }"#,
    r#"{ personData(value: "{PERSON}") { id } }"#,
    // Mutations about an endpoint.
    r#"mutation { updateEndpoint(input: { id: "{EP}", name: "Taken" }) { endpoint { id } } }"#,
    r#"mutation { updateEndpoint(input: { id: "{EP}", retentionDays: -1 }) { endpoint { id } } }"#,
    r#"mutation { rotateWebhookSecret(endpointId: "{EP}") { webhookSecret } }"#,
    r#"mutation { endWebhookSecretOverlap(endpointId: "{EP}") { endpoint { id } } }"#,
    r#"mutation { pauseEndpoint(endpointId: "{EP}") { endpoint { id } } }"#,
    r#"mutation { resumeEndpoint(endpointId: "{EP}") { heldDeliveries } }"#,
    r#"mutation { deleteEndpoint(input: { id: "{EP}", history: ERASE, cancelDeliveries: true }) { deletedEndpointId } }"#,
    r#"mutation { addWebhookDestination(input: { endpointId: "{EP}", url: "http://127.0.0.1:9/x" }) { destination { id } } }"#,
    r#"mutation { addAutoresponderDestination(input: { endpointId: "{EP}", subject: "s", body: "b" }) { destination { id } } }"#,
    r#"mutation { addEmailDestination(input: { endpointId: "{EP}", recipients: ["owner@example.com"] }) { destination { id } } }"#,
    r#"mutation { setSpamProtection(input: { endpointId: "{EP}", blockedWords: ["x"] }) { endpoint { id } } }"#,
    r#"mutation { removeSpamProtection(endpointId: "{EP}") { endpoint { id } } }"#,
    r#"mutation { replayDeliveries(filter: { endpointId: "{EP}" }) { count } }"#,
    r#"mutation { replayDeliveries(filter: { destinationId: "{DST}" }) { count } }"#,
    r#"mutation { createEndpoint(input: { id: "fresh", name: "Fresh", projectId: "{PRJ}" }) { endpoint { id } } }"#,
    // Mutations about a destination.
    r#"mutation { updateDestination(input: { id: "{DST}", maxInFlight: 2 }) { destination { id } } }"#,
    r#"mutation { pauseDestination(id: "{DST}") { destination { id } } }"#,
    r#"mutation { resumeDestination(id: "{DST}") { heldDeliveries } }"#,
    r#"mutation { rotateDestinationSecret(id: "{DST}") { webhookSecret } }"#,
    r#"mutation { endDestinationSecretOverlap(id: "{DST}") { destination { id } } }"#,
    r#"mutation { removeDestination(id: "{DST}", cancelDeliveries: true) { cancelledDeliveries } }"#,
    // Mutations about a submission, a delivery, a person.
    r#"mutation { replayDelivery(id: "{DLV}") { delivery { id } } }"#,
    r#"mutation { markSubmissionSpam(id: "{SUB}") { submission { id } } }"#,
    r#"mutation { markSubmissionNotSpam(id: "{SUB}") { queuedDeliveries } }"#,
    r#"mutation { deleteSubmission(id: "{SUB}") { deletedSubmissionId } }"#,
    r#"mutation { erasePersonData(value: "{PERSON}") { erasedSubmissionIds } }"#,
    // Keys and projects.
    r#"mutation { createApiKey(input: { name: "x", role: READ, projectId: "{PRJ}" }) { key } }"#,
    r#"mutation { updateApiKey(input: { id: "{KEY}", name: "renamed" }) { id } }"#,
    r#"mutation { revokeApiKey(id: "{KEY}") { id } }"#,
    r#"mutation { renameProject(id: "{PRJ}", name: "Taken") { id } }"#,
    r#"mutation { deleteProject(id: "{PRJ}") { id } }"#,
];

/// Project A's state as an admin of every project reads it: what must not change.
const STATE_OF_A: &str = r#"{
  endpoint(id: "alpha") { name isActive webhookUrl retentionDays deliveryState
    destinations { id url pausedAt maxInFlight } spamProtection { blockedWords } }
  submissions(filter: { endpointId: "alpha", folder: ALL }) { nodes { id spam fields { name values } } }
  deliveries(filter: { endpointId: "alpha" }) { nodes { id state attempts } }
  apiKeys { id name revokedAt expiresAt }
}"#;

async fn create(app: &TestApp, key: &str, query: &str) -> Value {
    data(app.gql(key, query, json!({})).await)
}

/// A server delivering to loopback (webhooks, and email through `smtp`), and an admin key
/// of every project.
async fn installation(smtp: &SmtpServer) -> (TestApp, String) {
    let port = smtp.port();
    let app = TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_SMTP_HOST", "127.0.0.1"),
            ("FORMS_SMTP_PORT", &port),
            ("FORMS_SMTP_TLS", "none"),
            ("FORMS_SMTP_FROM", "Hymical Forms <forms@example.com>"),
        ],
        std::sync::Arc::new(hymical_forms::testing::clock::SystemClock),
    )
    .await;
    let (_, root) = app.create_key("installation").await;
    (app, root)
}

/// A new project's id.
async fn project(app: &TestApp, root: &str, name: &str) -> String {
    let made = create(
        app,
        root,
        &format!(r#"mutation {{ createProject(name: "{name}") {{ id }} }}"#),
    )
    .await;
    made["createProject"]["id"].as_str().unwrap().to_string()
}

/// A new key of `project` with `role` (`ADMIN`, `READ`): the key and its id.
async fn project_key(
    app: &TestApp,
    root: &str,
    project: &str,
    name: &str,
    role: &str,
) -> (String, String) {
    let made = create(
        app,
        root,
        &format!(r#"mutation {{ createApiKey(input: {{ name: "{name}", role: {role}, projectId: "{project}" }}) {{ key apiKey {{ id projectId }} }} }}"#),
    )
    .await;
    assert_eq!(made["createApiKey"]["apiKey"]["projectId"], project);
    (
        made["createApiKey"]["key"].as_str().unwrap().to_string(),
        made["createApiKey"]["apiKey"]["id"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// A GraphQL request with `Hymical-Project: project`: its status and body.
async fn narrowed(app: &TestApp, key: &str, project: &str, query: &str) -> (u16, Value) {
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("authorization", format!("Bearer {key}"))
        .header("hymical-project", project)
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Project B's admin key, sending every operation about project A's things, gets what it
/// gets for ids nothing has, word for word; A's state is unchanged, the audit trail has
/// no entry by B's key, and B's listings, counts, subscriptions and exports hold none of
/// A's rows.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_of_one_project_cannot_see_or_touch_another() {
    let smtp = SmtpServer::start(&[]);
    let (app, root) = installation(&smtp).await;
    let receiver = Receiver::start().await;
    let (a, b) = (
        project(&app, &root, "A").await,
        project(&app, &root, "B").await,
    );
    let (key_a, key_a_id) = project_key(&app, &root, &a, "a-admin", "ADMIN").await;
    let (key_b, _) = project_key(&app, &root, &b, "b-admin", "ADMIN").await;

    // A's endpoint (made by A's key, so in A without naming it), with a webhook and a
    // delivered submission; B's likewise.
    let alpha = create(
        &app,
        &key_a,
        &format!(
            r#"mutation {{ createEndpoint(input: {{ id: "alpha", name: "Alpha", webhookUrl: "{}" }}) {{ endpoint {{ projectId destinations {{ id }} }} }} }}"#,
            receiver.url("/a")
        ),
    )
    .await;
    assert_eq!(alpha["createEndpoint"]["endpoint"]["projectId"], a.as_str());
    let destination = alpha["createEndpoint"]["endpoint"]["destinations"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    create(
        &app,
        &key_b,
        &format!(
            r#"mutation {{ createEndpoint(input: {{ id: "beta", name: "Beta", webhookUrl: "{}" }}) {{ endpoint {{ id }} }} }}"#,
            receiver.url("/b")
        ),
    )
    .await;
    let submission = app
        .submit("alpha", "email=ann%40example.com&message=hello")
        .await;
    app.submit("beta", "email=bob%40example.com&message=hi")
        .await;
    app.worker(None).run_once().await.expect("a worker pass");
    receiver.wait_for(2).await;
    let delivery = app.db.delivery_ids().await;
    let delivery_of_a = {
        let answer = create(
            &app,
            &key_a,
            r#"{ deliveries(filter: { endpointId: "alpha" }) { nodes { id } } }"#,
        )
        .await;
        answer["deliveries"]["nodes"][0]["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(delivery.contains(&delivery_of_a));

    let held = Held {
        endpoint: "alpha".into(),
        destination,
        submission,
        delivery: delivery_of_a,
        key: key_a_id,
        project: a.clone(),
        person: "ann@example.com".into(),
    };
    let unknown = Held::unknown();
    let before = create(&app, &root, STATE_OF_A).await;
    let audit_before = app
        .db
        .count("SELECT count(*) AS n FROM audit_entries")
        .await;

    for operation in OPERATIONS {
        let foreign = app.gql(&key_b, &held.fill(operation), json!({})).await;
        let nothing = app.gql(&key_b, &unknown.fill(operation), json!({})).await;
        assert_eq!(
            held.unfill(&foreign),
            unknown.unfill(&nothing),
            "{operation}: another project's answer differs from an unknown id's"
        );
        assert!(
            !foreign.to_string().contains("ann@example.com")
                && !foreign.to_string().contains("hello"),
            "{operation}: {foreign}"
        );
    }
    // Nothing of A changed, and B's key wrote no entry about A (its refusals change
    // nothing; the two endpoints it made are the only other entries).
    assert_eq!(create(&app, &root, STATE_OF_A).await, before);
    let by_b_about_a = app
        .db
        .count(&format!(
            "SELECT count(*) AS n FROM audit_entries WHERE key_name = 'b-admin' AND (project_id = '{a}' OR 'alpha' = ANY(targets))"
        ))
        .await;
    assert_eq!(by_b_about_a, 0);
    assert!(
        app.db
            .count("SELECT count(*) AS n FROM audit_entries")
            .await
            >= audit_before
    );

    // B's listings and counts hold B's rows only; A's hold A's.
    let lists = r#"{ endpoints { nodes { id } } submissions(filter: { folder: ALL }) { nodes { endpoint { id } } }
        deliveries { nodes { endpoint { id } } } deliveryCounts { delivered } projects { id } apiKeys { name } }"#;
    let seen_by_b = create(&app, &key_b, lists).await;
    assert_eq!(seen_by_b["endpoints"]["nodes"], json!([{ "id": "beta" }]));
    let beta = json!([{ "endpoint": { "id": "beta" } }]);
    assert_eq!(seen_by_b["submissions"]["nodes"], beta);
    assert_eq!(seen_by_b["deliveries"]["nodes"], beta);
    assert_eq!(seen_by_b["deliveryCounts"]["delivered"], 1);
    assert_eq!(seen_by_b["projects"], json!([{ "id": b }]));
    assert_eq!(seen_by_b["apiKeys"], json!([{ "name": "b-admin" }]));
    let seen_by_root = create(&app, &root, lists).await;
    assert_eq!(
        seen_by_root["endpoints"]["nodes"].as_array().unwrap().len(),
        2
    );
    assert_eq!(seen_by_root["deliveryCounts"]["delivered"], 2);

    // A key of every project narrowed to B with the header sees B only.
    let (_, seen) = narrowed(&app, &root, &b, "{ endpoints { nodes { id } } }").await;
    assert_eq!(
        seen["data"]["endpoints"]["nodes"],
        json!([{ "id": "beta" }])
    );
    // …and makes keys of B only: without a project, one of B; with A, none.
    for (input, expected) in [
        (r#"{ name: "n", role: READ }"#.to_string(), json!(b)),
        (
            format!(r#"{{ name: "n", role: READ, projectId: "{a}" }}"#),
            json!(null),
        ),
    ] {
        let make =
            format!("mutation {{ createApiKey(input: {input}) {{ apiKey {{ projectId }} }} }}");
        let (_, answer) = narrowed(&app, &root, &b, &make).await;
        assert_eq!(
            answer["data"]["createApiKey"]["apiKey"]["projectId"], expected,
            "{answer}"
        );
    }
    // Narrowed, it manages no project.
    let (_, answer) = narrowed(
        &app,
        &root,
        &b,
        r#"mutation { createProject(name: "C") { id } }"#,
    )
    .await;
    assert_eq!(
        answer["errors"][0]["extensions"]["code"], "INSTALLATION_KEY_REQUIRED",
        "{answer}"
    );
    // The installation's figures are not a project's.
    for (key, expected) in [(&key_b, 403), (&root, 200)] {
        let response = app
            .http
            .get(app.url("/metrics"))
            .header("authorization", format!("Bearer {key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected);
    }
    // B's key naming A (or an unknown project) in the header: one answer for both.
    for project in [a.as_str(), UNKNOWN_PROJECT] {
        let (status, body) =
            narrowed(&app, &key_b, project, "{ endpoints { nodes { id } } }").await;
        assert_eq!(status, 404);
        assert_eq!(body["error"]["code"], "project_not_found", "{body}");
    }

    // Exports: A's endpoint exports as an unknown one does, and the whole export is B's.
    let export = |endpoint: Option<&str>| {
        let url = match endpoint {
            Some(id) => app.url(&format!(
                "/submissions/export?format=json&folder=all&endpoint_id={id}"
            )),
            None => app.url("/submissions/export?format=json&folder=all"),
        };
        let key_b = key_b.clone();
        let http = app.http.clone();
        async move {
            let response = http
                .get(url)
                .header("authorization", format!("Bearer {key_b}"))
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let (status, foreign) = export(Some("alpha")).await;
    let (unknown_status, nothing) = export(Some(UNKNOWN_ENDPOINT)).await;
    assert_eq!(
        (status, foreign.replace("alpha", "{EP}")),
        (unknown_status, nothing.replace(UNKNOWN_ENDPOINT, "{EP}"))
    );
    let (_, everything) = export(None).await;
    assert!(everything.contains("bob@example.com"), "{everything}");
    assert!(!everything.contains("ann@example.com"), "{everything}");
    // Each export is on record under the key that made it.
    let exports = app
        .db
        .count("SELECT count(*) AS n FROM audit_entries WHERE operation = 'export' AND key_name = 'b-admin'")
        .await;
    assert_eq!(exports, 3);
}

/// Subscriptions of project B's key get B's events only, whichever filter: A's endpoint
/// as a filter is silent, as an unknown one is.
#[tokio::test(flavor = "multi_thread")]
async fn subscriptions_carry_only_the_keys_project() {
    let smtp = SmtpServer::start(&[]);
    let (app, root) = installation(&smtp).await;
    let receiver = Receiver::start().await;
    let b = project(&app, &root, "B").await;
    let (key_b, _) = project_key(&app, &root, &b, "b", "READ").await;
    for (id, in_project) in [("alpha", None), ("beta", Some(&b))] {
        let in_project = in_project.map_or(String::new(), |p| format!(r#", projectId: "{p}""#));
        create(
            &app,
            &root,
            &format!(
                r#"mutation {{ createEndpoint(input: {{ id: "{id}", name: "{id}", webhookUrl: "{}"{in_project} }}) {{ endpoint {{ id }} }} }}"#,
                receiver.url("/")
            ),
        )
        .await;
    }
    let ws_url = app.url("/graphql/ws").replace("http://", "ws://");
    // A key of every project subscribes first with the same document: identical live
    // subscriptions share an execution, but never across what their keys see.
    let mut root_all = WsClient::ready(&ws_url, &root).await;
    root_all.subscribe_events("all", "").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut all = WsClient::ready(&ws_url, &key_b).await;
    all.subscribe_events("all", "").await;
    let mut of_a = WsClient::ready(&ws_url, &key_b).await;
    of_a.subscribe_events("a", "endpointId: \"alpha\"").await;
    let mut endpoint_events = WsClient::ready(&ws_url, &key_b).await;
    endpoint_events
        .send(json!({ "type": "subscribe", "id": "e", "payload": { "query": "subscription { endpointStateChanged { endpointId kind } }" } }))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    app.submit("alpha", "message=a").await;
    app.submit("beta", "message=b").await;
    app.worker(None).run_once().await.expect("a worker pass");
    create(
        &app,
        &root,
        r#"mutation { pauseEndpoint(endpointId: "alpha") { endpoint { id } } }"#,
    )
    .await;
    create(
        &app,
        &root,
        r#"mutation { pauseEndpoint(endpointId: "beta") { endpoint { id } } }"#,
    )
    .await;

    // B's delivery: created, processing, delivered; nothing of alpha's.
    let events = all.events("all", 3).await;
    for event in &events {
        assert_eq!(event["endpointId"], "beta", "{event}");
    }
    all.quiet_for(Duration::from_millis(700)).await;
    // The key of every project got both endpoints' events.
    let seen: std::collections::BTreeSet<String> = root_all
        .events("all", 6)
        .await
        .iter()
        .map(|event| event["endpointId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    of_a.quiet_for(Duration::from_millis(300)).await;
    let paused = endpoint_events.next_json().await;
    assert_eq!(
        paused["payload"]["data"]["endpointStateChanged"]["endpointId"], "beta",
        "{paused}"
    );
    endpoint_events.quiet_for(Duration::from_millis(300)).await;
}

/// An installation from before projects: its endpoints and keys are in the default
/// project, and today's requests answer as they did (a key of every project sees every
/// endpoint; an endpoint created without a project goes into the default one).
#[tokio::test(flavor = "multi_thread")]
async fn existing_endpoints_and_keys_are_in_the_default_project() {
    let (app, key) = TestApp::with_contact_endpoint().await;
    let answer = create(
        &app,
        &key,
        r#"{ apiKey { projectId } projects { id name } endpoint(id: "contact") { projectId } }"#,
    )
    .await;
    assert_eq!(answer["apiKey"]["projectId"], Value::Null);
    let default = "prj_00000000000000000000000000000000";
    assert_eq!(
        answer["projects"],
        json!([{ "id": default, "name": "Default" }])
    );
    assert_eq!(answer["endpoint"]["projectId"], default);
}

/// Keys through the API: made with a name, a role, a project and an expiry, shown once;
/// renamed; an expired key, a revoked one and one of a deleted project are refused as an
/// unknown key is; bad input stores nothing.
#[tokio::test(flavor = "multi_thread")]
async fn keys_are_named_expired_revoked_and_end_with_their_project() {
    let app = TestApp::start().await;
    let (_, root) = app.create_key("installation").await;
    let p = create(
        &app,
        &root,
        r#"mutation { createProject(name: "Agency") { id } }"#,
    )
    .await;
    let p = p["createProject"]["id"].as_str().unwrap().to_string();
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let made = create(
        &app,
        &root,
        &format!(r#"mutation {{ createApiKey(input: {{ name: "ci", role: READ, projectId: "{p}", expiresAt: "{soon}" }}) {{ key apiKey {{ id name role projectId expiresAt displayPrefix }} }} }}"#),
    )
    .await;
    let key = made["createApiKey"]["key"].as_str().unwrap().to_string();
    let id = made["createApiKey"]["apiKey"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(made["createApiKey"]["apiKey"]["role"], "READ");
    assert!(key.starts_with(
        made["createApiKey"]["apiKey"]["displayPrefix"]
            .as_str()
            .unwrap()
    ));
    let (status, _) = app
        .graphql(Some(&format!("Bearer {key}")), "{ version }")
        .await;
    assert_eq!(status, 200);
    // A read key manages nothing.
    let (status, refused) = app
        .graphql(
            Some(&format!("Bearer {key}")),
            r#"mutation { createProject(name: "x") { id } }"#,
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "INSUFFICIENT_ROLE",
        "{refused}"
    );
    let (_, refused) = app
        .graphql(Some(&format!("Bearer {key}")), "{ apiKeys { id } }")
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "INSUFFICIENT_ROLE",
        "{refused}"
    );
    // Renamed; then its expiry passes and it is refused as an unknown key is.
    let renamed = create(
        &app,
        &root,
        &format!(
            r#"mutation {{ updateApiKey(input: {{ id: "{id}", name: "ci runner" }}) {{ name }} }}"#
        ),
    )
    .await;
    assert_eq!(renamed["updateApiKey"]["name"], "ci runner");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, body) = app
        .graphql(Some(&format!("Bearer {key}")), "{ version }")
        .await;
    assert_eq!(status, 401, "{body}");

    // Bad input is refused by name and stores nothing.
    let keys_before = app
        .db
        .count("SELECT count(*) AS n FROM management_api_keys")
        .await;
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    for (input, code) in [
        (
            format!(r#"{{ name: "x", role: READ, expiresAt: "{past}" }}"#),
            "INVALID_INPUT",
        ),
        (r#"{ name: "  ", role: READ }"#.to_string(), "INVALID_INPUT"),
        (
            format!(r#"{{ name: "x", role: READ, projectId: "{UNKNOWN_PROJECT}" }}"#),
            "PROJECT_NOT_FOUND",
        ),
        (
            r#"{ name: "x", role: READ, projectId: "not-a-project" }"#.to_string(),
            "PROJECT_NOT_FOUND",
        ),
    ] {
        let answer = app
            .gql(
                &root,
                &format!("mutation {{ createApiKey(input: {input}) {{ key }} }}"),
                json!({}),
            )
            .await;
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], code,
            "{input}: {answer}"
        );
    }
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM management_api_keys")
            .await,
        keys_before
    );

    // A key of a project that is deleted stops working; a project with endpoints cannot
    // be deleted.
    let made = create(
        &app,
        &root,
        &format!(r#"mutation {{ createApiKey(input: {{ name: "team", role: ADMIN, projectId: "{p}" }}) {{ key }} }}"#),
    )
    .await;
    let team = made["createApiKey"]["key"].as_str().unwrap().to_string();
    create(
        &app,
        &team,
        r#"mutation { createEndpoint(input: { id: "site", name: "Site" }) { endpoint { id } } }"#,
    )
    .await;
    let refused = app
        .gql(
            &root,
            &format!(r#"mutation {{ deleteProject(id: "{p}") {{ id }} }}"#),
            json!({}),
        )
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "PROJECT_NOT_EMPTY",
        "{refused}"
    );
    create(&app, &team, r#"mutation { deleteEndpoint(input: { id: "site", history: ERASE }) { deletedEndpointId } }"#).await;
    create(
        &app,
        &root,
        &format!(r#"mutation {{ deleteProject(id: "{p}") {{ deletedAt }} }}"#),
    )
    .await;
    let (status, _) = app
        .graphql(Some(&format!("Bearer {team}")), "{ version }")
        .await;
    assert_eq!(status, 401);
    // Into a deleted project nothing goes.
    let answer = app
        .gql(&root, &format!(r#"mutation {{ createEndpoint(input: {{ id: "late", name: "Late", projectId: "{p}" }}) {{ endpoint {{ id }} }} }}"#), json!({}))
        .await;
    assert_eq!(
        answer["errors"][0]["extensions"]["code"], "PROJECT_NOT_FOUND",
        "{answer}"
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM endpoints WHERE id = 'late'")
            .await,
        0
    );

    // Revoked: refused from the next request on.
    let made = create(
        &app,
        &root,
        r#"mutation { createApiKey(input: { name: "short", role: READ }) { key apiKey { id } } }"#,
    )
    .await;
    let short = made["createApiKey"]["key"].as_str().unwrap().to_string();
    let short_id = made["createApiKey"]["apiKey"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    create(
        &app,
        &root,
        &format!(r#"mutation {{ revokeApiKey(id: "{short_id}") {{ revokedAt }} }}"#),
    )
    .await;
    let (status, _) = app
        .graphql(Some(&format!("Bearer {short}")), "{ version }")
        .await;
    assert_eq!(status, 401);
}

/// The audit trail is read and followed live by admins: a key of every project gets every
/// entry, a project's admin key its project's, a read key none; each entry names the key,
/// the operation, its targets and its arguments without secrets.
#[tokio::test(flavor = "multi_thread")]
async fn the_audit_trail_is_read_and_followed_live_by_admins() {
    let smtp = SmtpServer::start(&[]);
    let (app, root) = installation(&smtp).await;
    let b = project(&app, &root, "B").await;
    let (admin_b, _) = project_key(&app, &root, &b, "b-ADMIN", "ADMIN").await;
    let (read_b, _) = project_key(&app, &root, &b, "b-READ", "READ").await;
    let ws_url = app.url("/graphql/ws").replace("http://", "ws://");
    let follow =
        r#"subscription { auditEntryAdded { operation keyName targets projectId changes } }"#;
    let mut everything = WsClient::ready(&ws_url, &root).await;
    everything
        .send(json!({ "type": "subscribe", "id": "t", "payload": { "query": follow } }))
        .await;
    let mut of_b = WsClient::ready(&ws_url, &admin_b).await;
    of_b.send(json!({ "type": "subscribe", "id": "t", "payload": { "query": follow } }))
        .await;
    let mut reader = WsClient::ready(&ws_url, &read_b).await;
    reader
        .send(json!({ "type": "subscribe", "id": "t", "payload": { "query": follow } }))
        .await;
    let refused = reader.next_json().await;
    assert_eq!(refused["type"], "next", "{refused}");
    assert_eq!(
        refused["payload"]["errors"][0]["extensions"]["code"], "INSUFFICIENT_ROLE",
        "{refused}"
    );
    // Both subscriptions are live once a change in B reaches each (a bounded number of
    // tries: a subscription starts listening a moment after it is acknowledged).
    let rename = format!(r#"mutation {{ renameProject(id: "{b}", name: "B") {{ id }} }}"#);
    for client in [&mut everything, &mut of_b] {
        let mut live = false;
        for _ in 0..20 {
            create(&app, &root, &rename).await;
            if client
                .next_within(Duration::from_millis(500))
                .await
                .is_some()
            {
                live = true;
                break;
            }
        }
        assert!(live, "the subscription never went live");
    }
    // Whatever the probes left in flight.
    everything.drain(Duration::from_millis(500)).await;
    of_b.drain(Duration::from_millis(500)).await;

    // One change outside B (the default project), one in B with a secret in it.
    create(&app, &root, r#"mutation { createEndpoint(input: { id: "outside", name: "Outside" }) { endpoint { id } } }"#).await;
    create(
        &app,
        &admin_b,
        r#"mutation { createEndpoint(input: { id: "inside", name: "Inside", webhookUrl: "https://hooks.example.com/x" }) { webhookSecret } }"#,
    )
    .await;
    let entry = |message: Value| message["payload"]["data"]["auditEntryAdded"].clone();
    let first = entry(everything.next_json().await);
    let second = entry(everything.next_json().await);
    assert_eq!(first["targets"], json!(["outside"]), "{first}");
    assert_eq!(second["targets"], json!(["inside"]), "{second}");
    assert_eq!(second["keyName"], "b-ADMIN");
    assert_eq!(second["projectId"], b.as_str());
    assert_eq!(second["changes"]["input"]["name"], "Inside");
    let seen_by_b = entry(of_b.next_json().await);
    assert_eq!(seen_by_b, second);
    of_b.quiet_for(Duration::from_millis(500)).await;

    // Queried: newest first, a project's admin sees its project's entries only.
    let listed = create(
        &app,
        &admin_b,
        "{ auditEntries(first: 50) { nodes { operation targets projectId } } }",
    )
    .await;
    let nodes = listed["auditEntries"]["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty());
    assert!(
        nodes.iter().all(|node| node["projectId"] == b.as_str()),
        "{listed}"
    );
    assert_eq!(nodes[0]["targets"], json!(["inside"]));
    let (_, refused) = app
        .graphql(
            Some(&format!("Bearer {read_b}")),
            "{ auditEntries { nodes { id } } }",
        )
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "INSUFFICIENT_ROLE",
        "{refused}"
    );
    // No secret reached the trail: the webhook's secret was made by the server, and the
    // keys made above are in no entry.
    let all = create(
        &app,
        &root,
        "{ auditEntries(first: 100) { nodes { changes } } }",
    )
    .await;
    assert!(!all.to_string().contains("hym_live_"), "{all}");
}

/// The audit trail keeps its own retention: the workers' `forget` job deletes the entries
/// older than `FORMS_AUDIT_RETENTION_DAYS` and keeps the rest (0: all).
#[tokio::test(flavor = "multi_thread")]
async fn audit_entries_past_their_retention_are_deleted() {
    use diesel_async::SimpleAsyncConnection;
    let (app, key) = TestApp::with_contact_endpoint().await;
    create(
        &app,
        &key,
        r#"mutation { pauseEndpoint(endpointId: "contact") { endpoint { id } } }"#,
    )
    .await;
    let mut conn = app.db.connect().await;
    conn.batch_execute(
        "INSERT INTO audit_entries (at, key_id, key_name, operation, targets, changes)
         VALUES (now() - interval '40 days', 'mk_x', 'old', 'pauseEndpoint', '{contact}', '{}'),
                (now() - interval '31 days', 'mk_x', 'old', 'resumeEndpoint', '{contact}', '{}')",
    )
    .await
    .unwrap();
    let entries = || app.db.count("SELECT count(*) AS n FROM audit_entries");
    let before = entries().await;
    let pool = app.app.db.clone();
    hymical_forms::testing::upkeep::forget::run(pool.clone(), chrono::Utc::now(), 0).await;
    assert_eq!(entries().await, before, "0 keeps every entry");
    hymical_forms::testing::upkeep::forget::run(pool, chrono::Utc::now(), 30).await;
    assert_eq!(entries().await, before - 2);
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM audit_entries WHERE key_name = 'old'")
            .await,
        0
    );
}
