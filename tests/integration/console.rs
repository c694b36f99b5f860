//! The operator's console in a real browser (headless Chromium over WebDriver, every host
//! but 127.0.0.1 unresolvable), against a real `serve` process and a real receiver: sign
//! in with a key the CLI printed, create an endpoint from the keyboard, watch a delivery
//! go PENDING → PROCESSING → DELIVERED without a reload, fail one, replay it and a bulk
//! of them from the page, read a submission whose values are markup, export, the overview
//! at desktop and phone width, and a revoked key signing the console out; and an
//! endpoint paused by its receiver's 410, resumed, rotated, paused by hand and deleted,
//! all from its page; the form snippet of an endpoint whose honeypot name, stored by an
//! older release, is markup; an endpoint's destinations (two webhooks and an email)
//! listed, paused, resumed, added and removed from its page; a webhook destination added
//! from its page as an ordered Slack one, and another's options (its auth, headers, Ed25519
//! key, retries) listed with no secret in the page; an email delivery the
//! mail server refused, its SMTP reply in the timeline; and the project switcher, the keys
//! page (a key made, shown once, renamed, given an expiry and revoked) and the audit trail
//! followed live.
//!
//! Screenshots of the main views are written to a temporary directory, or to
//! `docs/console/` with `FORMS_UPDATE_SCREENSHOTS=1` (how the ones there were made).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fantoccini::key::Key;
use fantoccini::{Client, Locator};

use std::sync::Arc;

use hymical_forms::testing::clock::SystemClock;
use serde_json::json;

use support::browser::{
    browser, click, loaded_resources, sign_in, start_driver, type_into, wait_for_text, Driver,
};
use support::harness::{graphql_data, wait_for_status, ServeProcess, TestApp, TestDb};
use support::receiver::Receiver;
use support::smtp_server::SmtpServer;

/// A browser signed in with `key`, on the console's page `#/{page}` (the driver runs
/// while held).
async fn console_page(app: &TestApp, key: &str, page: &str) -> (Driver, Client) {
    let driver = start_driver().await;
    let client = browser(&driver).await;
    let console = app.url("/console");
    sign_in(&client, &console, key).await;
    client.goto(&format!("{console}#/{page}")).await.unwrap();
    (driver, client)
}

fn printed(stdout: &str, label: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} line in {stdout}"))
        .trim()
        .to_string()
}

struct Screenshots {
    dir: std::path::PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Screenshots {
    fn new() -> Screenshots {
        if std::env::var_os("FORMS_UPDATE_SCREENSHOTS").is_some() {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console");
            std::fs::create_dir_all(&dir).unwrap();
            Screenshots { dir, _temp: None }
        } else {
            let temp = tempfile::tempdir().unwrap();
            Screenshots {
                dir: temp.path().to_path_buf(),
                _temp: Some(temp),
            }
        }
    }

    async fn take(&self, client: &Client, name: &str) {
        let png = client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
        std::fs::write(self.dir.join(format!("{name}.png")), png).unwrap();
    }
}

/// Waits up to 60 s for `attribute` of `css` to be `wanted`.
async fn wait_for_attribute(client: &Client, css: &str, attribute: &str, wanted: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        if let Ok(element) = client.find(Locator::Css(css)).await {
            if let Ok(value) = element.attr(attribute).await {
                if value.as_deref() == Some(wanted) {
                    return;
                }
                last = value;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css} [{attribute}] never became {wanted:?}; last: {last:?}");
}

/// Nothing on the page is wider than the window (no sideways scrolling).
async fn assert_fits_the_window(client: &Client) {
    let overflow = client
        .execute(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert!(overflow.as_i64().unwrap() <= 0, "{overflow} px too wide");
}

/// Waits for a delivery id the database had not got before.
async fn new_delivery(db: &TestDb, seen: &mut HashSet<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(row) = db
            .deliveries()
            .await
            .into_iter()
            .find(|d| !seen.contains(&d.id))
        {
            seen.insert(row.id.clone());
            return row.id;
        }
        assert!(Instant::now() < deadline, "no new delivery");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn post_form(serve: &ServeProcess, endpoint: &str, body: &str) {
    let response = support::harness::post_urlencoded(
        &reqwest::Client::new(),
        serve.url(&format!("/f/{endpoint}")),
        body.to_string(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 202);
}

/// Waits until the live indicator says the subscription socket is acknowledged, then a
/// moment for the subscription the view sent right after to be registered.
async fn wait_until_live(client: &Client) {
    wait_for_attribute(client, "#live-status", "data-status", "live").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_follows_deliveries_live_from_sign_in_to_replay() {
    let db = TestDb::new().await;
    let receiver = Receiver::start().await;
    let serve = ServeProcess::start(
        &db,
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "2"),
            ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "0.5"),
            ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "0.5"),
        ],
    );
    wait_for_status(&serve.url("/health"), 200).await;
    let created = db.cli_stdout(&["keys", "create", "--name", "console"]);
    let key_id = printed(&created, "id:");
    let key = printed(&created, "key:");
    let shots = Screenshots::new();

    // The page's own headers: only this origin, no inline anything.
    // An API client asking for `/` gets the JSON 404; a browser is sent to the console.
    let root = reqwest::get(serve.url("/")).await.unwrap();
    assert_eq!(root.status(), 404);
    let page = reqwest::get(serve.url("/console")).await.unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.starts_with("default-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe"), "{policy}");

    let driver = start_driver().await;
    let client = browser(&driver).await;

    // A browser opening the server's address lands on the console's sign-in.
    client.goto(&serve.url("/")).await.unwrap();
    client
        .wait()
        .for_element(Locator::Css("#sign-in"))
        .await
        .expect("the sign-in form");
    assert_eq!(client.current_url().await.unwrap().path(), "/console");

    // A wrong key is refused in words and signs nobody in.
    type_into(&client, "#key", "hym_live_not-a-key-anybody-was-given").await;
    click(&client, "#sign-in button").await;
    wait_for_text(&client, "#sign-in-error", "That key was refused").await;
    shots.take(&client, "sign-in-refused").await;

    // The printed key signs in; it (and its role) is kept in this tab's session storage only.
    type_into(&client, "#key", &key).await;
    click(&client, "#sign-in button").await;
    wait_for_text(&client, "#view h1", "Overview").await;
    let storage = client
        .execute(
            "return [sessionStorage.length, localStorage.length, location.href];",
            vec![],
        )
        .await
        .unwrap();
    // The key, its role and its project (here: every project).
    assert_eq!(storage[0], 3);
    assert_eq!(storage[1], 0);
    assert!(!storage[2].as_str().unwrap().contains(&key));

    // Create an endpoint with the keyboard only: type, Tab to the next field, Enter.
    click(&client, "nav a[href='#/endpoints']").await;
    click(&client, "#new-endpoint").await;
    let id_field = client
        .wait()
        .for_element(Locator::Css("#field-id"))
        .await
        .unwrap();
    let active = client.active_element().await.unwrap();
    assert_eq!(
        active.attr("id").await.unwrap().as_deref(),
        Some("field-id"),
        "the form opens with its first field focused"
    );
    id_field
        .send_keys(&format!(
            "contact{}Contact form{}{}{}",
            Key::Tab,
            Key::Tab,
            receiver.url("/hang"),
            Key::Enter
        ))
        .await
        .unwrap();
    let secret = wait_for_text(&client, "#secret-value", "whsec_").await;
    assert_eq!(secret.len(), 70, "{secret}");
    let snippet = wait_for_text(&client, "#form-snippet", "/f/contact").await;
    assert!(snippet.contains(&serve.url("/f/contact")), "{snippet}");
    assert!(snippet.contains("method=\"post\""), "{snippet}");
    shots.take(&client, "endpoint-created").await;
    click(&client, "#done").await;
    wait_for_text(&client, "#endpoint-status", "active").await;

    // An error from the API is said in words, on the form, and nothing is created.
    client
        .goto(&serve.url("/console#/endpoints/new"))
        .await
        .unwrap();
    type_into(&client, "#field-id", "contact").await;
    type_into(&client, "#field-name", &format!("Again{}", Key::Enter)).await;
    wait_for_text(
        &client,
        "#form-error",
        "An endpoint with this id exists already",
    )
    .await;

    // A delivery appears and moves PENDING → PROCESSING → DELIVERED on the page: the
    // receiver holds the request, so PROCESSING lasts until the test lets it answer.
    let mut seen = HashSet::new();
    client
        .goto(&serve.url("/console#/deliveries?endpoint=contact"))
        .await
        .unwrap();
    wait_for_text(&client, "#no-deliveries", "No delivery").await;
    wait_until_live(&client).await;
    post_form(&serve, "contact", "email=ada%40example.com&message=hello").await;
    let first = new_delivery(&db, &mut seen).await;
    let row = format!("tr[data-delivery='{first}']");
    wait_for_attribute(&client, &row, "data-state", "PROCESSING").await;
    wait_for_text(&client, &format!("{row} .trail"), "PENDING → PROCESSING").await;
    shots.take(&client, "deliveries-live").await;
    receiver.stop_hanging();
    wait_for_attribute(&client, &row, "data-state", "DELIVERED").await;
    wait_for_text(
        &client,
        &format!("{row} .trail"),
        "PENDING → PROCESSING → DELIVERED",
    )
    .await;
    let reloads = client
        .execute(
            "return performance.getEntriesByType('navigation').length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(reloads, 1, "no reload happened");

    // Point the endpoint at a failing receiver from its page (a new URL gets a new secret).
    client
        .goto(&serve.url("/console#/endpoints/contact"))
        .await
        .unwrap();
    type_into(&client, "#field-webhookUrl", &receiver.url("/failing")).await;
    click(&client, "#endpoint-form button[type='submit']").await;
    wait_for_text(&client, "#secret-value", "whsec_").await;
    assert!(receiver.failing.load(Ordering::SeqCst));

    // It fails until FAILED; the delivery's page shows the attempts; replay from there.
    client
        .goto(&serve.url("/console#/deliveries?endpoint=contact"))
        .await
        .unwrap();
    wait_until_live(&client).await;
    post_form(
        &serve,
        "contact",
        "email=bob%40example.com&message=%3Cb%3Ehi%3C%2Fb%3E",
    )
    .await;
    let failing = new_delivery(&db, &mut seen).await;
    let row = format!("tr[data-delivery='{failing}']");
    wait_for_attribute(&client, &row, "data-state", "FAILED").await;
    click(&client, &format!("{row} a")).await;
    wait_for_attribute(&client, "#delivery-state", "data-state", "FAILED").await;
    wait_for_text(&client, "#attempts li[data-number='2']", "HTTP 500").await;
    let first_attempt = wait_for_text(&client, "#attempts li[data-number='1']", "#1").await;
    assert!(first_attempt.contains("http error"), "{first_attempt}");
    assert!(first_attempt.contains(" ms"), "{first_attempt}");
    shots.take(&client, "delivery-failed").await;
    receiver.failing.store(false, Ordering::SeqCst);
    wait_until_live(&client).await;
    click(&client, "#replay").await;
    wait_for_text(&client, "#events", "replayed").await;
    wait_for_attribute(&client, "#delivery-state", "data-state", "DELIVERED").await;
    let third = wait_for_text(&client, "#attempts li[data-number='3']", "succeeded").await;
    assert!(third.contains("HTTP 200"), "{third}");
    wait_for_text(&client, "#events", "→ DELIVERED (succeeded)").await;
    shots.take(&client, "delivery-replayed").await;

    // Bulk replay: two more fail; the page says how many match before replaying them.
    receiver.failing.store(true, Ordering::SeqCst);
    post_form(&serve, "contact", "email=c%40example.com").await;
    post_form(&serve, "contact", "email=d%40example.com").await;
    db.wait_for_deliveries(60, |rows| {
        rows.iter().filter(|d| d.state == "failed").count() == 2
    })
    .await;
    receiver.failing.store(false, Ordering::SeqCst);
    client
        .goto(&serve.url("/console#/deliveries?endpoint=contact&state=FAILED"))
        .await
        .unwrap();
    wait_until_live(&client).await;
    click(&client, "#bulk-replay-start").await;
    wait_for_text(&client, "#bulk-replay-count", "2 failed deliveries match").await;
    shots.take(&client, "bulk-replay-confirm").await;
    click(&client, "#bulk-replay-confirm").await;
    wait_for_text(&client, "#flash", "2 deliveries replayed").await;
    db.wait_for_deliveries(60, |rows| {
        rows.len() == 4 && rows.iter().all(|d| d.state == "delivered")
    })
    .await;

    // The submission's values are shown as text, markup included, never as markup.
    client
        .goto(&serve.url("/console#/submissions?endpoint=contact"))
        .await
        .unwrap();
    let submission = db.delivery(&failing).await.submission_id.unwrap();
    click(&client, &format!("tr[data-submission='{submission}'] a")).await;
    let fields = wait_for_text(&client, "#fields", "<b>hi</b>").await;
    assert!(fields.contains("bob@example.com"), "{fields}");
    let markup = client
        .execute(
            "return document.querySelectorAll('#fields b').length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(markup, 0, "a submitted value became markup");
    shots.take(&client, "submission").await;

    // Export, with the key as a header (never in the URL).
    client
        .goto(&serve.url("/console#/submissions?endpoint=contact"))
        .await
        .unwrap();
    click(&client, "#export-csv").await;
    wait_for_text(&client, "#export-status", "Exported CSV").await;
    click(&client, "#export-json").await;
    wait_for_text(&client, "#export-status", "Exported JSON").await;

    // The overview's figures are the server's: four delivered, none failed.
    client.goto(&serve.url("/console#/overview")).await.unwrap();
    wait_for_text(&client, "#count-delivered", "4").await;
    wait_for_text(&client, "#count-failed", "0").await;
    wait_for_text(&client, "#endpoint-counts tr[data-endpoint='contact']", "4").await;
    // Four deliveries ended delivered and three failed (the two, and the first before
    // its replay) within the hour.
    wait_for_text(&client, "#activity figcaption", "4 delivered").await;
    wait_for_text(&client, "#activity figcaption", "3 failed").await;
    wait_until_live(&client).await;
    // Live: a new delivery moves the counts without a reload.
    post_form(&serve, "contact", "email=e%40example.com").await;
    wait_for_text(&client, "#count-delivered", "5").await;
    shots.take(&client, "overview").await;

    // Phone width: nothing wider than the screen.
    client.set_window_size(390, 844).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_fits_the_window(&client).await;
    shots.take(&client, "overview-phone").await;
    client
        .goto(&serve.url("/console#/deliveries"))
        .await
        .unwrap();
    wait_for_text(&client, "#deliveries", "DELIVERED").await;
    assert_fits_the_window(&client).await;
    client.set_window_size(1280, 900).await.unwrap();

    // Nothing the console loaded came from anywhere but this server.
    let origin = serve.url("");
    for url in loaded_resources(&client).await {
        assert!(url.starts_with(&origin), "{url} is not from {origin}");
    }

    // Revoking the key signs the open console out.
    wait_until_live(&client).await;
    db.cli_stdout(&["keys", "revoke", &key_id]);
    wait_for_text(&client, "#sign-in-error", "no longer accepted").await;
    let left = client
        .execute("return sessionStorage.length;", vec![])
        .await
        .unwrap();
    assert_eq!(left, 0, "the key was forgotten");

    client.close().await.unwrap();
    drop(serve);
}

/// A GraphQL call to `serve` with `key`; the `data`, asserting no errors.
async fn gql(serve: &ServeProcess, key: &str, query: &str) -> serde_json::Value {
    graphql_data(
        &reqwest::Client::new(),
        &serve.url("/graphql"),
        key,
        query,
        json!({}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_a_pause_and_resumes_rotates_and_deletes_the_endpoint() {
    let db = TestDb::new().await;
    let receiver = Receiver::start().await;
    let serve = ServeProcess::start(
        &db,
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ],
    );
    wait_for_status(&serve.url("/health"), 200).await;
    let key = printed(
        &db.cli_stdout(&["keys", "create", "--name", "console"]),
        "key:",
    );
    let shots = Screenshots::new();
    gql(
        &serve,
        &key,
        &format!(
            "mutation {{ createEndpoint(input: {{ id: \"newsletter\", name: \"Newsletter\", webhookUrl: \"{}\" }}) {{ endpoint {{ id }} }} }}",
            receiver.url("/gone")
        ),
    )
    .await;

    let driver = start_driver().await;
    let client = browser(&driver).await;
    client.goto(&serve.url("/console")).await.unwrap();
    type_into(&client, "#key", &key).await;
    click(&client, "#sign-in button").await;
    wait_for_text(&client, "#view h1", "Overview").await;

    // The receiver answers 410: the endpoint pauses, and says why on its page and in the
    // list; what is posted meanwhile is held.
    post_form(&serve, "newsletter", "email=a%40example.com").await;
    receiver.wait_for(1).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while db
        .count("SELECT count(*) AS n FROM destinations WHERE paused_at IS NOT NULL")
        .await
        == 0
    {
        assert!(Instant::now() < deadline, "the endpoint never paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in 0..3 {
        post_form(
            &serve,
            "newsletter",
            &format!("email=held{n}%40example.com"),
        )
        .await;
    }
    client
        .goto(&serve.url("/console#/endpoints"))
        .await
        .unwrap();
    wait_for_text(
        &client,
        "tr[data-endpoint='newsletter'] .tag.paused",
        "deliveries paused",
    )
    .await;
    click(&client, "tr[data-endpoint='newsletter'] a").await;
    wait_for_text(
        &client,
        "#endpoint-delivery-state",
        "receiver answered 410 Gone",
    )
    .await;
    shots.take(&client, "endpoint-paused").await;
    assert_eq!(receiver.received().len(), 1, "nothing is sent while paused");

    // Resume from the page: the three held deliveries go out.
    receiver.gone.store(false, Ordering::SeqCst);
    click(&client, "#toggle-paused").await;
    wait_for_text(&client, "#flash", "3 held deliveries are due now").await;
    wait_for_text(&client, "#endpoint-delivery-state", "running").await;
    receiver.wait_for(4).await;

    // Rotate: the old secret is listed as still signing until the overlap ends, and can be
    // stopped at once.
    click(&client, "#rotate").await;
    click(&client, "#confirm-rotate").await;
    wait_for_text(&client, "#secret-value", "whsec_").await;
    wait_for_text(
        &client,
        "#webhook-secrets li[data-role='PREVIOUS']",
        "still signing until",
    )
    .await;
    click(&client, "#end-overlap").await;
    wait_for_text(&client, "#flash", "no longer signs").await;
    let secrets = client
        .find_all(Locator::Css("#webhook-secrets li"))
        .await
        .unwrap();
    assert_eq!(secrets.len(), 1);

    // Pause by hand, post one, then delete: refused in words while it is owed, and no
    // choice of keep or erase means no delete at all.
    click(&client, "#toggle-paused").await;
    wait_for_text(&client, "#endpoint-delivery-state", "an operator paused it").await;
    post_form(&serve, "newsletter", "email=owed%40example.com").await;
    click(&client, "#delete-endpoint").await;
    let confirm = client.find(Locator::Css("#confirm-delete")).await.unwrap();
    assert!(
        !confirm.is_enabled().await.unwrap(),
        "deleting waits for a choice"
    );
    click(&client, "#history-keep").await;
    click(&client, "#confirm-delete").await;
    wait_for_text(
        &client,
        "#action-error",
        "still has deliveries waiting or in flight",
    )
    .await;
    click(&client, "#delete-endpoint").await;
    click(&client, "#history-keep").await;
    click(&client, "#cancel-deliveries").await;
    click(&client, "#confirm-delete").await;
    wait_for_text(
        &client,
        "#flash",
        "its history was kept. 1 owed delivery was cancelled",
    )
    .await;
    wait_for_text(&client, "#view h1", "Endpoints").await;
    assert!(client
        .find(Locator::Css("tr[data-endpoint='newsletter']"))
        .await
        .is_err());

    // The tombstone's page: deleted, history kept; its history erased from there.
    client
        .goto(&serve.url("/console#/endpoints/newsletter"))
        .await
        .unwrap();
    wait_for_text(&client, "#endpoint-delivery-state", "its history is kept").await;
    click(&client, "#delete-endpoint").await;
    click(&client, "#confirm-delete").await;
    wait_for_text(&client, "#flash", "its history was erased").await;
    assert_eq!(
        db.count(
            "SELECT (SELECT count(*) FROM endpoints) + (SELECT count(*) FROM submissions)
               + (SELECT count(*) FROM webhook_deliveries) AS n"
        )
        .await,
        0
    );
    client.close().await.unwrap();
}

/// A honeypot name that is markup: it closes the attribute and the tag, adds an image
/// whose error handler runs script, and carries an entity, a quote of the other kind and a
/// script element, so each escape the snippet needs is exercised.
const HOSTILE_HONEYPOT: &str =
    "\"><img src=x onerror=alert(4)> ' &amp; </form><script>alert(5)</script>";

const CREATE_ENDPOINT: &str = "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id honeypotField } } }";
const UPDATE_ENDPOINT: &str = "mutation($input: UpdateEndpointInput!) { updateEndpoint(input: $input) { endpoint { id honeypotField } } }";

/// The API refuses a honeypot name that is not a plain form field name, at creation and
/// in an update, with `INVALID_INPUT` naming `honeypotField`, and changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_refuses_a_honeypot_name_that_is_not_a_plain_field_name() {
    let app = TestApp::start_without_rate_limit().await;
    let (_, key) = app.create_key("console").await;
    let refused = |body: &serde_json::Value| {
        let error = &body["errors"][0]["extensions"];
        assert_eq!(error["code"], "INVALID_INPUT", "{body}");
        assert_eq!(error["details"]["field"], "honeypotField", "{body}");
        assert!(
            !body.to_string().contains("onerror"),
            "the refused value is not echoed: {body}"
        );
    };
    for hostile in [HOSTILE_HONEYPOT, "web site", "1website", "wébsite"] {
        let body = app
            .gql(
                &key,
                CREATE_ENDPOINT,
                json!({"input": {"id": "contact", "name": "Contact", "honeypotField": hostile}}),
            )
            .await;
        refused(&body);
    }
    assert_eq!(app.db.count("SELECT count(*) AS n FROM endpoints").await, 0);

    let body = app
        .gql(
            &key,
            CREATE_ENDPOINT,
            json!({"input": {"id": "contact", "name": "Contact", "honeypotField": "contact[fax]"}}),
        )
        .await;
    assert_eq!(
        body["data"]["createEndpoint"]["endpoint"]["honeypotField"], "contact[fax]",
        "{body}"
    );
    let body = app
        .gql(
            &key,
            UPDATE_ENDPOINT,
            json!({"input": {"id": "contact", "honeypotField": HOSTILE_HONEYPOT}}),
        )
        .await;
    refused(&body);
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM endpoints WHERE honeypot_field = 'contact[fax]'")
            .await,
        1,
        "the refused update changed nothing"
    );
}

/// An endpoint whose honeypot name is markup, as an older release could store it: the
/// snippet shown on its page, parsed as HTML by the browser, is one form with exactly one
/// honeypot input named by that very text, and no image or script; nothing ran.
#[tokio::test(flavor = "multi_thread")]
async fn the_form_snippet_escapes_a_hostile_honeypot_name_stored_by_an_older_release() {
    let app = TestApp::start_without_rate_limit().await;
    let (_, key) = app.create_key("console").await;
    let body = app
        .gql(
            &key,
            CREATE_ENDPOINT,
            json!({"input": {"id": "contact", "name": "Contact", "honeypotField": "website"}}),
        )
        .await;
    assert!(body.get("errors").is_none(), "{body}");
    // What the API no longer accepts, written as an older release would have stored it.
    // (Diesel's `execute` in a block of its own: fantoccini's `Client::execute` is the one
    // this file means everywhere else.)
    {
        use diesel_async::RunQueryDsl;
        let mut conn = app.db.connect().await;
        let updated = diesel::sql_query("UPDATE endpoints SET honeypot_field = $1 WHERE id = $2")
            .bind::<diesel::sql_types::Text, _>(HOSTILE_HONEYPOT)
            .bind::<diesel::sql_types::Text, _>("contact")
            .execute(&mut conn)
            .await
            .unwrap();
        assert_eq!(updated, 1);
    }

    let driver = start_driver().await;
    let client = browser(&driver).await;
    client.goto(&app.url("/console")).await.unwrap();
    type_into(&client, "#key", &key).await;
    click(&client, "#sign-in button").await;
    wait_for_text(&client, "#view h1", "Overview").await;
    // Every dialog the page could open is recorded instead; the endpoint's page is opened
    // in this same document (a hash change), so the record survives.
    client
        .execute(
            "window.dialogs = [];
             for (const name of ['alert', 'confirm', 'prompt']) {
               window[name] = (...args) => { window.dialogs.push([name, ...args]); };
             }
             location.hash = '#/endpoints/contact';",
            vec![],
        )
        .await
        .unwrap();
    wait_for_text(&client, "#form-snippet", "/f/contact").await;
    // The settings form shows the stored name as it is, as the input's value.
    let shown = client
        .find(Locator::Css("#field-honeypotField"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(shown.as_deref(), Some(HOSTILE_HONEYPOT));

    let parsed = client
        .execute(
            "const pre = document.querySelector('#form-snippet');
             const text = pre.textContent;
             const doc = new DOMParser().parseFromString(text, 'text/html');
             const form = doc.querySelector('form');
             return {
               text,
               elementsInThePage: pre.querySelectorAll('*').length,
               forms: doc.querySelectorAll('form').length,
               action: form && form.getAttribute('action'),
               inputs: doc.querySelectorAll('input').length,
               honeypots: [...doc.querySelectorAll('input[type=text][hidden]')].map((i) => i.getAttribute('name')),
               images: doc.querySelectorAll('img').length,
               scripts: doc.querySelectorAll('script').length,
               dialogs: window.dialogs,
             };",
            vec![],
        )
        .await
        .unwrap();
    let text = parsed["text"].as_str().unwrap();
    assert_eq!(
        parsed["elementsInThePage"], 1,
        "the snippet is text in one code element, not markup: {parsed}"
    );
    assert_eq!(parsed["forms"], 1, "{text}");
    assert_eq!(parsed["action"], app.url("/f/contact"), "{text}");
    assert_eq!(parsed["inputs"], 2, "the email and the honeypot: {text}");
    assert_eq!(parsed["honeypots"], json!([HOSTILE_HONEYPOT]), "{text}");
    assert_eq!(parsed["images"], 0, "{text}");
    assert_eq!(parsed["scripts"], 0, "{text}");
    assert_eq!(parsed["dialogs"], json!([]), "no dialog was asked for");
    assert!(client.get_alert_text().await.is_err(), "no dialog is open");
    client.close().await.unwrap();
}

/// The controls that change something, on each page: with a read key none may show, with
/// an admin key each does (so their absence is the role's, not a page that never loaded).
const WRITE_CONTROLS: &[(&str, &str, &[&str])] = &[
    // (page, what shows once it has loaded, the write controls on it)
    (
        "#/endpoints",
        "tr[data-endpoint='contact']",
        &["#new-endpoint"],
    ),
    (
        "#/endpoints/contact",
        "#form-snippet",
        &[
            "#endpoint-form",
            "#delete-endpoint",
            "#toggle-active",
            "#toggle-paused",
            "#rotate",
            // Its one destination's pause and remove, and the forms adding more.
            "#destinations .toggle-destination",
            "#destinations .remove-destination",
            "#email-destination-form",
            "#webhook-destination-form",
        ],
    ),
    ("#/deliveries", "#deliveries", &["#bulk-replay-start"]),
    (
        "#/submissions",
        "#submissions",
        &["#export-csv", "#export-json"],
    ),
];

/// Each write control of every page: how many the page shows, once it has loaded.
async fn write_controls_shown(
    client: &Client,
    console: &str,
    failed: &str,
) -> Vec<(String, usize)> {
    let mut shown = Vec::new();
    let delivery_page = format!("#/deliveries/{failed}");
    let pages = WRITE_CONTROLS
        .iter()
        .map(|(page, loaded, controls)| (page.to_string(), *loaded, controls.to_vec()))
        .chain([(delivery_page, "#delivery-state", vec!["#replay"])]);
    for (page, loaded, controls) in pages {
        client.goto(&format!("{console}{page}")).await.unwrap();
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(loaded))
            .await
            .unwrap_or_else(|e| panic!("{page}: {loaded}: {e}"));
        for control in controls {
            let found = client.find_all(Locator::Css(control)).await.unwrap().len();
            shown.push((format!("{page} {control}"), found));
        }
    }
    shown
}

/// Signed in with a read key (`keys create --role read`), the console says so and offers
/// no action that changes anything (no create, edit, pause, rotate, delete, replay or
/// export); signed in with an admin key, the same pages offer every one of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_key_sees_the_console_without_its_write_actions() {
    use hymical_forms::testing::model::state::KeyRole;
    let app = TestApp::start_without_rate_limit().await;
    let (_, admin) = app.create_key_with_role("operator", KeyRole::Admin).await;
    let (_, reader) = app.create_key_with_role("dashboard", KeyRole::Read).await;
    app.webhook_endpoint("contact", "https://receiver.example/hook")
        .await;
    app.submit("contact", "email=a%40example.com").await;
    // A failed delivery: what an admin key could replay.
    let failed = app.db.deliveries().await[0].id.clone();
    {
        use diesel_async::RunQueryDsl;
        let mut conn = app.db.connect().await;
        diesel::sql_query(
            "UPDATE webhook_deliveries SET state = 'failed', completed_at = now() WHERE id = $1",
        )
        .bind::<diesel::sql_types::Text, _>(&failed)
        .execute(&mut conn)
        .await
        .unwrap();
    }

    let driver = start_driver().await;
    let console = app.url("/console");
    for (key, read_only) in [(&reader, true), (&admin, false)] {
        let client = browser(&driver).await;
        client.goto(&console).await.unwrap();
        type_into(&client, "#key", key).await;
        click(&client, "#sign-in button").await;
        wait_for_text(&client, "#view h1", "Overview").await;
        let badge = client.find_all(Locator::Css("#key-role")).await.unwrap();
        assert_eq!(badge.len(), usize::from(read_only));
        if read_only {
            wait_for_text(&client, "#key-role", "Read-only key").await;
        }
        for (control, shown) in write_controls_shown(&client, &console, &failed).await {
            if read_only {
                assert_eq!(shown, 0, "a read key is offered {control}");
            } else {
                assert_eq!(shown, 1, "an admin key is not offered {control}");
            }
        }
        if read_only {
            client
                .goto(&format!("{console}#/endpoints/new"))
                .await
                .unwrap();
            wait_for_text(&client, "#view .read-only", "read-only").await;
            assert!(client
                .find_all(Locator::Css("#endpoint-form"))
                .await
                .unwrap()
                .is_empty());
        }
        client.close().await.unwrap();
    }
}

/// `FORMS_SMTP_*` for a mail server on loopback (plaintext: it is on loopback), with no
/// rate limits: what a server needs to accept email destinations.
fn smtp_vars(smtp: &SmtpServer) -> Vec<(&'static str, String)> {
    let mut vars = vec![("FORMS_RATE_LIMIT_ENABLED", "false".into())];
    vars.extend(smtp.vars());
    vars
}

async fn app_with_smtp(smtp: &SmtpServer) -> TestApp {
    let owned = smtp_vars(smtp);
    let pairs: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestApp::start_with(&pairs, Arc::new(SystemClock)).await
}

/// The data of a GraphQL answer, failing the test on any error.
async fn api(
    app: &TestApp,
    key: &str,
    query: &str,
    variables: serde_json::Value,
) -> serde_json::Value {
    let answer = app.gql(key, query, variables).await;
    assert!(answer.get("errors").is_none(), "{answer}");
    answer["data"].clone()
}

const ADD_WEBHOOK: &str = "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id } } }";
const ADD_EMAIL: &str = "mutation($input: AddEmailDestinationInput!) { addEmailDestination(input: $input) { destination { id } } }";
const DESTINATIONS: &str = "query($id: ID!) { endpoint(id: $id) { destinations { id kind url recipients replyToField state pauseReason } } }";

/// The endpoint's destinations as the API lists them, in order.
async fn destinations(app: &TestApp, key: &str, endpoint: &str) -> Vec<serde_json::Value> {
    api(app, key, DESTINATIONS, json!({ "id": endpoint })).await["endpoint"]["destinations"]
        .as_array()
        .unwrap()
        .clone()
}

/// Waits up to 30 s for `css` to match exactly `n` elements.
async fn wait_for_count(client: &Client, css: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = client.find_all(Locator::Css(css)).await.unwrap().len();
        if found == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{css}: {found} elements, never {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An endpoint delivering to two webhooks and an email: its page lists the three with
/// their addresses and state; one webhook is paused and resumed from the page (the API
/// says so each time, and the others never change); an email destination is added
/// through the form, a bad recipient refused in words with nothing created; a webhook
/// destination is added (its secret shown once) and removed. On a server without a mail
/// server the same form says why it cannot add one.
#[tokio::test(flavor = "multi_thread")]
async fn the_endpoint_page_lists_pauses_resumes_and_adds_destinations() {
    let smtp = SmtpServer::start(&[]);
    let app = app_with_smtp(&smtp).await;
    let (_, key) = app.create_key("console").await;
    api(
        &app,
        &key,
        CREATE_ENDPOINT,
        json!({"input": {"id": "contact", "name": "Contact", "webhookUrl": "https://hooks.example.com/forms"}}),
    )
    .await;
    api(
        &app,
        &key,
        ADD_WEBHOOK,
        json!({"input": {"endpointId": "contact", "url": "https://crm.example.net/intake?source=forms&team=sales"}}),
    )
    .await;
    api(
        &app,
        &key,
        ADD_EMAIL,
        json!({"input": {"endpointId": "contact", "recipients": ["owner@example.com", "sales@example.com"]}}),
    )
    .await;
    let listed = destinations(&app, &key, "contact").await;
    let ids: Vec<String> = listed
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 3);

    let (driver, client) = console_page(&app, &key, "endpoints/contact").await;

    // The three, in order, each with its kind, its address and its state.
    wait_for_count(&client, "#destinations tbody tr", 3).await;
    let row = |id: &str| format!("#destinations tr[data-destination='{id}']");
    for (id, kind, text) in [
        (&ids[0], "WEBHOOK", "https://hooks.example.com/forms"),
        (
            &ids[1],
            "WEBHOOK",
            "https://crm.example.net/intake?source=forms&team=sales",
        ),
        (&ids[2], "EMAIL", "owner@example.com, sales@example.com"),
    ] {
        wait_for_attribute(&client, &row(id), "data-kind", kind).await;
        wait_for_attribute(&client, &row(id), "data-state", "RUNNING").await;
        let shown = wait_for_text(&client, &row(id), text).await;
        assert!(shown.contains("active"), "{shown}");
    }
    wait_for_text(&client, &row(&ids[2]), "Reply-To from the field email").await;

    // Pause the second webhook from the page: only it is paused, by an operator.
    click(&client, &format!("{} .toggle-destination", row(&ids[1]))).await;
    wait_for_attribute(&client, &row(&ids[1]), "data-state", "PAUSED").await;
    wait_for_text(&client, &row(&ids[1]), "an operator paused it").await;
    wait_for_text(&client, "#flash", "Paused").await;
    wait_for_text(
        &client,
        "#endpoint-delivery-state",
        "1 of its 3 destinations is paused",
    )
    .await;
    let states: Vec<(String, serde_json::Value)> = destinations(&app, &key, "contact")
        .await
        .iter()
        .map(|d| {
            (
                d["state"].as_str().unwrap().to_string(),
                d["pauseReason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("RUNNING".to_string(), json!(null)),
            ("PAUSED".to_string(), json!("OPERATOR")),
            ("RUNNING".to_string(), json!(null)),
        ]
    );
    assert_eq!(
        app.db
            .count(&format!(
                "SELECT count(*) AS n FROM destinations WHERE paused_at IS NOT NULL AND id = '{}'",
                ids[1]
            ))
            .await,
        1
    );
    let shots = Screenshots::new();
    shots.take(&client, "endpoint-destinations").await;

    // Resume it from the page.
    click(&client, &format!("{} .toggle-destination", row(&ids[1]))).await;
    wait_for_attribute(&client, &row(&ids[1]), "data-state", "RUNNING").await;
    wait_for_text(&client, "#flash", "Resumed: 0 held deliveries are due now").await;
    assert!(destinations(&app, &key, "contact")
        .await
        .iter()
        .all(|d| d["state"] == "RUNNING"));
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM destinations WHERE paused_at IS NOT NULL")
            .await,
        0
    );

    // A bad recipient: the API's refusal, in words, on the form; nothing is added.
    type_into(
        &client,
        "#field-recipients",
        "desk@example.com, not an address",
    )
    .await;
    click(&client, "#email-destination-form button[type='submit']").await;
    wait_for_text(
        &client,
        "#email-destination-error",
        "The value of recipients is not valid",
    )
    .await;
    assert_eq!(destinations(&app, &key, "contact").await.len(), 3);

    // Two good ones, with the default Reply-To field: added at the end, and listed.
    type_into(
        &client,
        "#field-recipients",
        "desk@example.com, night@example.com",
    )
    .await;
    click(&client, "#email-destination-form button[type='submit']").await;
    wait_for_text(&client, "#flash", "Email destination added").await;
    wait_for_count(&client, "#destinations tbody tr", 4).await;
    let listed = destinations(&app, &key, "contact").await;
    assert_eq!(listed.len(), 4);
    assert_eq!(listed[3]["kind"], "EMAIL");
    assert_eq!(
        listed[3]["recipients"],
        json!(["desk@example.com", "night@example.com"])
    );
    assert_eq!(listed[3]["replyToField"], "email");
    let added = listed[3]["id"].as_str().unwrap().to_string();
    wait_for_text(&client, &row(&added), "desk@example.com, night@example.com").await;

    // A webhook destination through its form: its secret is shown once.
    type_into(
        &client,
        "#field-destinationUrl",
        "https://backup.example.org/hook",
    )
    .await;
    click(&client, "#webhook-destination-form button[type='submit']").await;
    wait_for_text(&client, "#secret-value", "whsec_").await;
    wait_for_count(&client, "#destinations tbody tr", 5).await;
    let listed = destinations(&app, &key, "contact").await;
    assert_eq!(listed[4]["url"], "https://backup.example.org/hook");

    // Remove the added email destination, after confirming: listed no more, its history
    // kept.
    click(&client, &format!("{} .remove-destination", row(&added))).await;
    click(&client, "#confirm-remove-destination").await;
    wait_for_text(&client, "#flash", "Destination removed").await;
    wait_for_count(&client, "#destinations tbody tr", 4).await;
    assert!(destinations(&app, &key, "contact")
        .await
        .iter()
        .all(|d| d["id"] != added.as_str()));
    assert_eq!(
        app.db
            .count(&format!(
                "SELECT count(*) AS n FROM destinations WHERE removed_at IS NOT NULL AND id = '{added}'"
            ))
            .await,
        1
    );
    client.close().await.unwrap();

    // A server without a mail server refuses an email destination, and the form says why.
    let plain = TestApp::start_without_rate_limit().await;
    let (_, plain_key) = plain.create_key("console").await;
    api(
        &plain,
        &plain_key,
        CREATE_ENDPOINT,
        json!({"input": {"id": "contact", "name": "Contact"}}),
    )
    .await;
    let client = browser(&driver).await;
    let console = plain.url("/console");
    sign_in(&client, &console, &plain_key).await;
    client
        .goto(&format!("{console}#/endpoints/contact"))
        .await
        .unwrap();
    wait_for_text(&client, "#no-destinations", "None").await;
    type_into(&client, "#field-recipients", "owner@example.com").await;
    click(&client, "#email-destination-form button[type='submit']").await;
    wait_for_text(
        &client,
        "#email-destination-error",
        "no mail server to send email through",
    )
    .await;
    assert!(destinations(&plain, &plain_key, "contact").await.is_empty());
    client.close().await.unwrap();
}

/// An email delivery the mail server refused with 550: the list and the delivery's page
/// name its destination (email, the recipients), and its timeline shows the SMTP reply
/// code and text where a webhook's shows the HTTP status; the submission's page lists it.
#[tokio::test(flavor = "multi_thread")]
async fn an_email_delivery_shows_the_mail_servers_reply_in_its_timeline() {
    let smtp = SmtpServer::start(&["--script", "550"]);
    let app = app_with_smtp(&smtp).await;
    let (_, key) = app.create_key("console").await;
    api(
        &app,
        &key,
        CREATE_ENDPOINT,
        json!({"input": {"id": "mail", "name": "Mail"}}),
    )
    .await;
    api(
        &app,
        &key,
        ADD_EMAIL,
        json!({"input": {"endpointId": "mail", "recipients": ["owner@example.com", "desk@example.com"]}}),
    )
    .await;
    let submission = app
        .submit("mail", "email=ada%40example.com&message=hello")
        .await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    let delivery = app.db.deliveries().await[0].id.clone();
    assert_eq!(
        app.db.delivery(&delivery).await.state,
        "failed",
        "550 is final"
    );

    let driver = start_driver().await;
    let client = browser(&driver).await;
    let console = app.url("/console");
    sign_in(&client, &console, &key).await;

    // The list names the destination.
    client
        .goto(&format!("{console}#/deliveries?endpoint=mail"))
        .await
        .unwrap();
    let row = format!("tr[data-delivery='{delivery}']");
    wait_for_attribute(&client, &row, "data-state", "FAILED").await;
    wait_for_attribute(&client, &format!("{row} .kind"), "data-kind", "EMAIL").await;
    wait_for_text(
        &client,
        &format!("{row} .destination-cell"),
        "owner@example.com, desk@example.com",
    )
    .await;

    // Its page: the destination, and the mail server's reply in the timeline.
    click(&client, &format!("{row} a")).await;
    wait_for_attribute(&client, "#delivery-state", "data-state", "FAILED").await;
    wait_for_text(
        &client,
        "#delivery-destination",
        "owner@example.com, desk@example.com",
    )
    .await;
    let attempt = wait_for_text(&client, "#attempts li[data-number='1']", "SMTP 550").await;
    assert!(attempt.contains("Scripted rejection of DATA"), "{attempt}");
    assert!(attempt.contains("smtp error"), "{attempt}");
    assert!(
        !attempt.contains("HTTP"),
        "an email attempt has no HTTP status: {attempt}"
    );
    let shots = Screenshots::new();
    shots.take(&client, "delivery-email-refused").await;

    // The submission's page lists its delivery with the same destination.
    client
        .goto(&format!("{console}#/submissions/{submission}"))
        .await
        .unwrap();
    wait_for_text(
        &client,
        &format!("#submission-deliveries li[data-delivery='{delivery}']"),
        "owner@example.com, desk@example.com",
    )
    .await;
    client.close().await.unwrap();
}

const OPTIONS: &str = "query($id: ID!) { endpoint(id: $id) { destinations { id url format ordered ed25519PublicKey } } }";

/// A webhook destination added from the endpoint's page with the Slack format and
/// ordered: the API stores both and the list says so. Another, given a bearer token, a
/// secret and a plain header, an Ed25519 key and its own retries through the API: its
/// row names the auth kind, the headers (the secret one marked), the key and the
/// retries, and neither the token nor the secret header's value is anywhere in the page.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_adds_an_ordered_slack_destination_and_shows_its_options() {
    let app = TestApp::start_without_rate_limit().await;
    let (_, key) = app.create_key("console").await;
    app.create_contact_endpoint(&key).await;
    let token = "tok-never-shown-5e1f";
    let secret_value = "hdr-never-shown-9a2c";
    api(
        &app,
        &key,
        ADD_WEBHOOK,
        json!({"input": {
            "endpointId": "contact",
            "url": "https://crm.example.net/intake",
            "auth": {"bearer": {"token": token}},
            "headers": [
                {"name": "X-Api-Key", "value": secret_value, "secret": true},
                {"name": "X-Source", "value": "forms"},
            ],
            "signWithEd25519": true,
            "retryPolicy": {"maxAttempts": 4, "firstWaitSeconds": 2, "maxWaitSeconds": 60},
        }}),
    )
    .await;
    let listed = api(&app, &key, OPTIONS, json!({ "id": "contact" })).await["endpoint"]
        ["destinations"]
        .clone();
    let first = listed[0]["id"].as_str().unwrap().to_string();
    let public_key = listed[0]["ed25519PublicKey"].as_str().unwrap().to_string();
    assert!(public_key.starts_with("whpk_"), "{public_key}");

    let (_driver, client) = console_page(&app, &key, "endpoints/contact").await;
    wait_for_count(&client, "#destinations tbody tr", 1).await;
    let row = |id: &str| format!("#destinations tr[data-destination='{id}']");

    // The one added through the API: its options, in words; no secret anywhere.
    wait_for_text(&client, &row(&first), "auth: Bearer token").await;
    let shown = wait_for_text(
        &client,
        &row(&first),
        "headers: X-Api-Key (secret), X-Source",
    )
    .await;
    assert!(shown.contains(&format!("Ed25519: {public_key}")), "{shown}");
    assert!(
        shown.contains("retries: at most 4 attempts, waiting 2 s at first and at most 60 s"),
        "{shown}"
    );
    assert!(
        !shown.contains("format:") && !shown.contains("ordered"),
        "{shown}"
    );
    let source = client.source().await.unwrap();
    assert!(!source.contains(token), "the token is in the page");
    assert!(
        !source.contains(secret_value),
        "the secret header's value is in the page"
    );

    // An ordered Slack webhook through the form: stored so, and listed so.
    type_into(
        &client,
        "#field-destinationUrl",
        "https://hooks.example.com/services/T0/B0/x",
    )
    .await;
    client
        .find(Locator::Css("#field-destinationFormat"))
        .await
        .unwrap()
        .select_by_value("SLACK")
        .await
        .unwrap();
    click(&client, "#field-destinationOrdered").await;
    click(&client, "#webhook-destination-form button[type='submit']").await;
    wait_for_text(&client, "#secret-value", "whsec_").await;
    wait_for_count(&client, "#destinations tbody tr", 2).await;
    let listed = api(&app, &key, OPTIONS, json!({ "id": "contact" })).await["endpoint"]
        ["destinations"]
        .clone();
    assert_eq!(
        listed[1]["url"],
        "https://hooks.example.com/services/T0/B0/x"
    );
    assert_eq!(listed[1]["format"], "SLACK");
    assert_eq!(listed[1]["ordered"], true);
    let added = listed[1]["id"].as_str().unwrap().to_string();
    let shown = wait_for_text(&client, &row(&added), "format: Slack").await;
    assert!(shown.contains("ordered"), "{shown}");
    let source = client.source().await.unwrap();
    assert!(!source.contains(token) && !source.contains(secret_value));
    client.close().await.unwrap();
}

const SETTINGS: &str = "query($id: ID!) { endpoint(id: $id) { destinations { id kind headers { name value secret } auth { kind username } retryPolicy { maxAttempts firstWaitSeconds maxWaitSeconds } bodyTemplate ed25519PublicKey clientCertificate { fingerprintSha256 } emailTemplate { subject text } } } }";

/// The endpoint `contact`'s destinations' receiver settings, as the API answers them.
async fn settings(app: &TestApp, key: &str) -> serde_json::Value {
    api(app, key, SETTINGS, json!({ "id": "contact" })).await["endpoint"]["destinations"].clone()
}

/// A webhook destination's and an email destination's settings edited from the
/// endpoint's page: a template that does not compile is refused where it breaks and
/// nothing is stored; then a new header beside the secret one (left empty, so kept),
/// Basic authentication, its own retries, Ed25519, a body template and a client
/// certificate are saved in one go, and the next delivery carries every one of them; a
/// second save touching nothing keeps the password unseen. The email destination's own
/// subject is the next email's. No password, secret value or private key is ever in the
/// page.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_edits_a_destinations_receiver_settings_and_never_shows_a_secret() {
    let smtp = SmtpServer::start(&[]);
    let mut vars = smtp_vars(&smtp);
    vars.push(("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true".into()));
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let app = TestApp::start_with(&pairs, Arc::new(SystemClock)).await;
    let receiver = Receiver::start().await;
    let (_, key) = app.create_key("console").await;
    app.create_contact_endpoint(&key).await;
    let secret_value = "hdr-kept-unseen-31f0";
    api(
        &app,
        &key,
        ADD_WEBHOOK,
        json!({"input": {
            "endpointId": "contact",
            "url": receiver.url("/hook"),
            "headers": [{"name": "X-Api-Key", "value": secret_value, "secret": true}],
        }}),
    )
    .await;
    api(
        &app,
        &key,
        ADD_EMAIL,
        json!({"input": {"endpointId": "contact", "recipients": ["owner@example.com"]}}),
    )
    .await;
    let before = settings(&app, &key).await;
    let webhook = before[0]["id"].as_str().unwrap().to_string();
    let email = before[1]["id"].as_str().unwrap().to_string();

    let authority = {
        let mut params = rcgen::CertificateParams::new(vec!["forms-client".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "forms-client");
        let key = rcgen::KeyPair::generate().unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    };
    let (certificate, private_key) = authority;
    let password = "pw-never-shown-77c1";

    let (_driver, client) = console_page(&app, &key, "endpoints/contact").await;
    wait_for_count(&client, "#destinations tbody tr", 2).await;
    let row = |id: &str| format!("#destinations tr[data-destination='{id}']");
    click(&client, &format!("{} .edit-destination", row(&webhook))).await;
    wait_for_text(&client, "#destination-settings-form", "Webhook settings").await;

    // A new plain header; the secret one's value is left empty.
    click(&client, "#add-header").await;
    let rows = client
        .find_all(Locator::Css("#settings-headers [data-header-row]"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    let secret_input = rows[0]
        .find(Locator::Css("[data-header='value']"))
        .await
        .unwrap();
    assert_eq!(
        secret_input.prop("value").await.unwrap().as_deref(),
        Some("")
    );
    rows[1]
        .find(Locator::Css("[data-header='name']"))
        .await
        .unwrap()
        .send_keys("X-Tenant")
        .await
        .unwrap();
    rows[1]
        .find(Locator::Css("[data-header='value']"))
        .await
        .unwrap()
        .send_keys("acme")
        .await
        .unwrap();
    client
        .find(Locator::Css("#settings-auth"))
        .await
        .unwrap()
        .select_by_value("BASIC")
        .await
        .unwrap();
    type_into(&client, "#settings-basic-username", "forms").await;
    type_into(&client, "#settings-basic-password", password).await;
    click(&client, "#settings-retry-own").await;
    type_into(&client, "#settings-retry-attempts", "5").await;
    type_into(&client, "#settings-retry-first", "1.5").await;
    type_into(&client, "#settings-retry-max", "120").await;
    click(&client, "#settings-ed25519").await;
    client
        .find(Locator::Css("#settings-client-certificate"))
        .await
        .unwrap()
        .select_by_value("NEW")
        .await
        .unwrap();
    type_into(&client, "#settings-certificate-pem", &certificate).await;
    type_into(&client, "#settings-certificate-key", &private_key).await;

    // A template that does not compile: refused where it breaks, nothing stored.
    type_into(
        &client,
        "#settings-body-template",
        "{\"message\": {{ values.message }",
    )
    .await;
    click(&client, "#destination-settings-form button[type='submit']").await;
    let refused = wait_for_text(&client, "#destination-settings-error", "line 1").await;
    assert!(refused.contains("column"), "{refused}");
    assert_eq!(
        settings(&app, &key).await,
        before,
        "a refused save stores nothing"
    );

    type_into(
        &client,
        "#settings-body-template",
        "{\"message\": {{ values.message }}, \"from\": \"forms\"}",
    )
    .await;
    client
        .execute(
            "document.getElementById('destination-settings-form').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    Screenshots::new()
        .take(&client, "destination-settings")
        .await;
    click(&client, "#destination-settings-form button[type='submit']").await;
    wait_for_text(&client, "#flash", "Destination saved.").await;
    let shown = wait_for_text(&client, &row(&webhook), "auth: Basic as forms").await;
    for expected in [
        "headers: X-Api-Key (secret), X-Tenant",
        "retries: at most 5 attempts, waiting 1.5 s at first and at most 120 s",
        "body: its own template",
        "TLS client certificate: SHA-256 ",
        "Ed25519: whpk_",
    ] {
        assert!(shown.contains(expected), "{expected} not in {shown}");
    }
    let after = settings(&app, &key).await;
    assert_eq!(
        after[0]["headers"],
        json!([
            {"name": "X-Api-Key", "value": null, "secret": true},
            {"name": "X-Tenant", "value": "acme", "secret": false},
        ])
    );
    assert_eq!(
        after[0]["auth"],
        json!({"kind": "BASIC", "username": "forms"})
    );
    assert_eq!(
        after[0]["retryPolicy"],
        json!({"maxAttempts": 5, "firstWaitSeconds": 1.5, "maxWaitSeconds": 120.0})
    );
    assert!(after[0]["clientCertificate"]["fingerprintSha256"].is_string());

    // Saved again with nothing touched: the password, the secret header and the
    // certificate are kept without being typed again.
    click(&client, &format!("{} .edit-destination", row(&webhook))).await;
    click(&client, "#destination-settings-form button[type='submit']").await;
    // Saved, the page is drawn again without the form.
    wait_for_count(&client, "#destination-settings-form", 0).await;
    assert_eq!(settings(&app, &key).await, after);

    // The email destination's own subject.
    click(&client, &format!("{} .edit-destination", row(&email))).await;
    wait_for_text(&client, "#destination-settings-form", "Email settings").await;
    type_into(
        &client,
        "#settings-email-subject",
        "Lead from {{ values.name }}",
    )
    .await;
    click(&client, "#destination-settings-form button[type='submit']").await;
    wait_for_count(&client, "#destination-settings-form", 0).await;
    wait_for_text(&client, &row(&email), "its own subject or text template").await;
    assert_eq!(
        settings(&app, &key).await[1]["emailTemplate"],
        json!({"subject": "Lead from {{ values.name }}", "text": null})
    );

    let source = client.source().await.unwrap();
    for secret in [password, secret_value, private_key.as_str()] {
        assert!(!source.contains(secret), "a secret is in the page");
    }
    let key_body = private_key.lines().nth(1).unwrap();
    assert!(!source.contains(key_body), "the private key is in the page");
    client.close().await.unwrap();

    // The next submission: the webhook gets every setting, the email its subject.
    app.submit("contact", "name=Ada&message=hello").await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 2);
    let request = receiver.wait_for(1).await.remove(0);
    assert_eq!(request.headers["x-api-key"], secret_value);
    assert_eq!(request.headers["x-tenant"], "acme");
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("forms:{password}")
        )
    );
    assert_eq!(request.headers["authorization"], basic.as_str());
    assert!(request.headers["webhook-signature"]
        .to_str()
        .unwrap()
        .contains("v1a,"));
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body, json!({"message": "hello", "from": "forms"}));
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    assert!(
        messages[0]["raw"]
            .as_str()
            .unwrap()
            .contains("Subject: Lead from Ada"),
        "{}",
        messages[0]["raw"]
    );
}

/// The submissions list's search box: the words given find the submissions holding them
/// (the page's address keeps them, so the list can be shared and paged), a search the API
/// refuses is said in its words, with a link back to the list without it.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_searches_submissions_by_their_words() {
    let (app, key) = TestApp::with_contact_endpoint().await;
    let lovelace = app
        .submit("contact", "name=Ada+Lovelace&message=Analytical+engine")
        .await;
    let hopper = app
        .submit("contact", "name=Grace+Hopper&message=Compilers")
        .await;

    let (_driver, client) = console_page(&app, &key, "submissions").await;
    wait_for_count(&client, "#submissions tbody tr", 2).await;
    type_into(&client, "#filter-search", "\"analytical engine\"").await;
    click(&client, "#submission-filter button[type='submit']").await;
    wait_for_count(&client, "#submissions tbody tr", 1).await;
    wait_for_text(&client, "#submissions", &lovelace).await;
    let shown = client
        .find(Locator::Css("#submissions"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!shown.contains(&hopper), "{shown}");
    assert!(client
        .current_url()
        .await
        .unwrap()
        .as_str()
        .contains("search="));

    type_into(&client, "#filter-search", "-ada").await;
    click(&client, "#submission-filter button[type='submit']").await;
    wait_for_text(&client, "main", "needs a word to find").await;
    click(&client, "#clear-search").await;
    wait_for_count(&client, "#submissions tbody tr", 2).await;
    client.close().await.unwrap();
}

/// A person's data page: the value finds every submission holding it (in any letter
/// case, on any endpoint, the spam folder too), downloaded as one JSON file with their
/// fields, files and delivery history; "Erase all…" erases them after a confirmation,
/// and another person's submission stays. The value never enters the page's address.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_finds_downloads_and_erases_a_persons_data() {
    let (app, key) = TestApp::with_contact_endpoint().await;
    let ada = app
        .submit("contact", "name=Ada&email=ada%40example.com&message=first")
        .await;
    let again = app
        .submit("contact", "name=Ada&email=ADA%40Example.com&message=second")
        .await;
    let grace = app
        .submit("contact", "name=Grace&email=grace%40example.org")
        .await;

    let (_driver, client) = console_page(&app, &key, "people").await;
    type_into(&client, "#person-value", "ada@EXAMPLE.com").await;
    click(&client, "#person-form button[type='submit']").await;
    wait_for_text(&client, "#person-count", "2 submissions hold this value").await;
    wait_for_count(&client, "#person-submissions tbody tr", 2).await;
    assert!(!client
        .current_url()
        .await
        .unwrap()
        .as_str()
        .to_lowercase()
        .contains("ada"));

    // The download: the file the page hands the browser, caught as it is made.
    let file: serde_json::Value =
        serde_json::from_str(&download_of(&client, "#person-download").await).unwrap();
    let mut ids: Vec<String> = file["submissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected = vec![ada.clone(), again.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    assert!(file["submissions"][0]["fields"].is_array(), "{file}");
    assert!(file["submissions"][0]["deliveries"].is_array(), "{file}");
    assert!(file["submissions"][0]["files"].is_array(), "{file}");

    click(&client, "#person-erase").await;
    click(&client, "#confirm-person-erase").await;
    wait_for_text(&client, "#flash", "Erased 2 submissions.").await;
    client.close().await.unwrap();
    let left = api(
        &app,
        &key,
        "query { personData(value: \"ada@example.com\") { id } }",
        json!({}),
    )
    .await;
    assert_eq!(left["personData"], json!([]));
    let kept = format!("SELECT count(*) AS n FROM submissions WHERE id = '{grace}'");
    assert_eq!(app.db.count(&kept).await, 1);
}

const CREATE_PROJECT: &str = "mutation($name: String!) { createProject(name: $name) { id } }";
const CREATE_IN_PROJECT: &str = "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id projectId } } }";
const KEYS: &str = "{ apiKeys { id name role projectId expiresAt revokedAt } }";

/// Chooses `project` ("" for All projects) in the header's switcher, applies it, and
/// waits for the page drawn again for it.
async fn switch_project(client: &Client, project: &str, label: &str) {
    let option = format!("#project-select option[value='{project}']");
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(&option))
        .await
        .unwrap_or_else(|e| panic!("{option}: {e}"));
    client
        .find(Locator::Css("#project-select"))
        .await
        .unwrap()
        .select_by_value(project)
        .await
        .unwrap();
    click(client, "#project-switch").await;
    wait_for_text(client, "#flash", &format!("Showing {label}.")).await;
}

/// The key named `name`, as the API lists it to `admin`.
async fn key_named(app: &TestApp, admin: &str, name: &str) -> serde_json::Value {
    let keys = api(app, admin, KEYS, json!({})).await["apiKeys"].clone();
    keys.as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("no key {name:?} in {keys}"))
        .clone()
}

/// Two projects with an endpoint each, and an admin key of every project in the console:
/// the header's switcher narrows the endpoints list to one project (the choice in session
/// storage only), an endpoint made from the console lands in the chosen project, and All
/// projects lists every endpoint again. On the keys page a read key of one project is
/// made and shown once (it works, for its project only), taken off the page, renamed,
/// given an expiry and revoked (the API then refuses it with 401). The audit trail lists
/// each of these changes, shows a pause made meanwhile through the API at the top without
/// a reload, and narrowed to one project lists and follows that project's entries only.
/// No key is anywhere in the page once its one display is gone. A project's own key sees
/// its project named in the header, no choice, and neither the keys page nor the audit
/// trail.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_switches_projects_manages_keys_and_shows_the_audit_trail() {
    use hymical_forms::testing::model::state::KeyRole;
    let app = TestApp::start_without_rate_limit().await;
    let (_, admin) = app.create_key("operator").await;
    let mut made = Vec::new();
    for name in ["Alpha", "Beta"] {
        let project = api(&app, &admin, CREATE_PROJECT, json!({ "name": name })).await;
        made.push(project["createProject"]["id"].as_str().unwrap().to_string());
    }
    let (alpha, beta) = (made[0].clone(), made[1].clone());
    for (id, name, project) in [
        ("alpha-form", "Alpha form", &alpha),
        ("beta-form", "Beta form", &beta),
    ] {
        // With a webhook: an endpoint without destinations has nothing to pause.
        let input = json!({ "input": {
            "id": id,
            "name": name,
            "projectId": project,
            "webhookUrl": format!("https://receiver.example/{id}"),
        } });
        let created = api(&app, &admin, CREATE_IN_PROJECT, input).await;
        assert_eq!(
            created["createEndpoint"]["endpoint"]["projectId"],
            json!(project)
        );
    }
    let console = app.url("/console");
    let shots = Screenshots::new();

    // Every project: both endpoints.
    let (_driver, client) = console_page(&app, &admin, "endpoints").await;
    wait_for_count(&client, "#endpoints tbody tr", 2).await;

    // Alpha: its endpoint alone; the choice is in this tab's session storage only.
    switch_project(&client, &alpha, "Alpha").await;
    wait_for_count(&client, "#endpoints tbody tr", 1).await;
    wait_for_count(&client, "#endpoints tr[data-endpoint='alpha-form']", 1).await;
    shots.take(&client, "projects-switched").await;
    let stored = client
        .execute(
            "return [sessionStorage.getItem('hymical-console-project'), localStorage.length, location.href];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(stored[0], json!(alpha));
    assert_eq!(stored[1], 0);
    assert!(!stored[2].as_str().unwrap().contains(&alpha), "{stored}");

    // An endpoint made from the console meanwhile lands in Alpha (the header, no field).
    client
        .goto(&format!("{console}#/endpoints/new"))
        .await
        .unwrap();
    type_into(&client, "#field-id", "alpha-new").await;
    type_into(&client, "#field-name", "Made in Alpha").await;
    click(&client, "#endpoint-form button[type='submit']").await;
    wait_for_text(&client, "#view h1", "Endpoint alpha-new created").await;
    let new = api(
        &app,
        &admin,
        "{ endpoint(id: \"alpha-new\") { projectId } }",
        json!({}),
    )
    .await;
    assert_eq!(new["endpoint"]["projectId"], json!(alpha));
    // Submissions and their export: Alpha's alone (the export carries the project too).
    let alpha_submission = app.submit("alpha-form", "email=a%40example.com").await;
    let beta_submission = app.submit("beta-form", "email=b%40example.com").await;
    client
        .goto(&format!("{console}#/submissions"))
        .await
        .unwrap();
    wait_for_count(&client, "#submissions tbody tr", 1).await;
    wait_for_text(&client, "#submissions", &alpha_submission).await;
    let exported = download_of(&client, "#export-json").await;
    wait_for_text(&client, "#export-status", "Exported JSON").await;
    assert!(exported.contains(&alpha_submission), "{exported}");
    assert!(!exported.contains(&beta_submission), "{exported}");

    client.goto(&format!("{console}#/endpoints")).await.unwrap();
    wait_for_count(&client, "#endpoints tbody tr", 2).await;
    assert!(client
        .find_all(Locator::Css("#endpoints tr[data-endpoint='beta-form']"))
        .await
        .unwrap()
        .is_empty());

    // All projects: every endpoint again, and no project sent.
    switch_project(&client, "", "All projects").await;
    wait_for_count(&client, "#endpoints tbody tr", 3).await;
    wait_for_count(&client, "#endpoints tr[data-endpoint='beta-form']", 1).await;
    let stored = client
        .execute(
            "return sessionStorage.getItem('hymical-console-project');",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(stored, serde_json::Value::Null);

    // The keys page: a read key of Alpha, shown once.
    click(&client, "nav a[href='#/keys']").await;
    wait_for_count(&client, "#keys tbody tr", 1).await;
    wait_for_text(&client, "#keys", "operator").await;
    type_into(&client, "#new-key-name", "alpha reader").await;
    for (select, value) in [
        ("#new-key-role", "READ"),
        ("#new-key-project", alpha.as_str()),
    ] {
        client
            .find(Locator::Css(select))
            .await
            .unwrap()
            .select_by_value(value)
            .await
            .unwrap();
    }
    click(&client, "#new-key-form button[type='submit']").await;
    wait_for_text(&client, "#new-key", "it will not be shown again").await;
    let secret = wait_for_text(&client, "#new-key-value", "hym_live_").await;
    let secret = secret.trim().to_string();
    wait_for_count(&client, "#keys tbody tr", 2).await;
    let bearer = format!("Bearer {secret}");
    let (status, answer) = app
        .graphql(
            Some(&bearer),
            "{ projects { id } apiKey { role projectId } }",
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["projects"], json!([{ "id": alpha }]));
    assert_eq!(answer["data"]["apiKey"]["role"], "READ");
    assert_eq!(answer["data"]["apiKey"]["projectId"], json!(alpha));
    let listed = key_named(&app, &admin, "alpha reader").await;
    let key_id = listed["id"].as_str().unwrap().to_string();
    let row = format!("#keys tr[data-key='{key_id}']");
    let shown = wait_for_text(&client, &row, "alpha reader").await;
    for part in ["read", "Alpha", "hym_live_", "never", "active"] {
        assert!(shown.contains(part), "{part:?} not in {shown:?}");
    }
    assert!(!shown.contains(&secret), "{shown}");
    // "I have copied it" takes it off the page for good.
    click(&client, "#new-key-done").await;
    wait_for_count(&client, "#new-key-value", 0).await;
    assert!(!client.source().await.unwrap().contains(&secret));

    // Renamed.
    click(&client, &format!("{row} .rename-key")).await;
    type_into(&client, "#rename-key-name", "alpha dashboard").await;
    click(&client, "#confirm-rename-key").await;
    wait_for_text(&client, &row, "alpha dashboard").await;
    wait_for_text(&client, "#flash", "is now called “alpha dashboard”").await;
    key_named(&app, &admin, "alpha dashboard").await;
    shots.take(&client, "keys").await;

    // Given an expiry, in the browser's time zone.
    click(&client, &format!("{row} .expiry-key")).await;
    client
        .execute(
            "const at = document.getElementById('expiry-key-at'); at.value = '2031-02-03T04:05'; at.dispatchEvent(new Event('input'));",
            vec![],
        )
        .await
        .unwrap();
    click(&client, "#confirm-expiry-key").await;
    wait_for_text(&client, &format!("{row} .key-expires"), "2031-02-03 04:05").await;
    let expires = key_named(&app, &admin, "alpha dashboard").await["expiresAt"].clone();
    let same = client
        .execute(
            "return new Date(arguments[0]).getTime() === new Date('2031-02-03T04:05').getTime();",
            vec![expires.clone()],
        )
        .await
        .unwrap();
    assert_eq!(same, json!(true), "{expires}");

    // Revoked after a confirmation: the API refuses it from then on.
    click(&client, &format!("{row} .revoke-key")).await;
    wait_for_text(&client, ".confirm", "This cannot be undone.").await;
    click(&client, "#confirm-revoke-key").await;
    wait_for_attribute(&client, &row, "data-state", "revoked").await;
    wait_for_count(&client, &format!("{row} button"), 0).await;
    let (status, _) = app.graphql(Some(&bearer), "{ projects { id } }").await;
    assert_eq!(status, 401);
    assert!(key_named(&app, &admin, "alpha dashboard").await["revokedAt"].is_string());

    // The audit trail: each change, with who made it, about what, in which project, 25
    // at a time. With 21 renames more, the page holds 31 entries: the 9 changes above,
    // the export and the renames.
    let rename =
        "mutation($id: ID!, $name: String!) { renameProject(id: $id, name: $name) { id } }";
    for n in (1..=20)
        .map(|n| format!("Beta {n}"))
        .chain(["Beta".to_string()])
    {
        api(&app, &admin, rename, json!({ "id": beta, "name": n })).await;
    }
    click(&client, "nav a[href='#/audit']").await;
    wait_for_count(&client, "#audit tbody tr", 25).await;
    wait_for_count(
        &client,
        "#audit tbody tr:first-child[data-operation='renameProject']",
        1,
    )
    .await;
    click(&client, "#audit-more").await;
    wait_for_count(&client, "#audit tbody tr", 31).await;
    wait_for_count(&client, "#audit-more[hidden]", 1).await;
    for (operation, n) in [
        ("createProject", 2),
        ("createEndpoint", 3),
        ("createApiKey", 1),
        ("updateApiKey", 2),
        ("revokeApiKey", 1),
        ("export", 1),
        ("renameProject", 21),
    ] {
        wait_for_count(
            &client,
            &format!("#audit tr[data-operation='{operation}']"),
            n,
        )
        .await;
    }
    let created = wait_for_text(&client, "#audit tr[data-operation='createApiKey']", &key_id).await;
    for part in ["operator", "Alpha", "alpha reader", "READ"] {
        assert!(created.contains(part), "{part:?} not in {created:?}");
    }
    let revoked = wait_for_text(&client, "#audit tr[data-operation='revokeApiKey']", &key_id).await;
    assert!(revoked.contains("Alpha"), "{revoked}");
    // Nothing anywhere in the page holds a key any more: not the one shown once, not the
    // console's own.
    let source = client.source().await.unwrap();
    assert!(
        !source.contains(&secret),
        "the new key is still in the page"
    );
    assert!(!source.contains(&admin), "the console's key is in the page");
    let storage = client
        .execute(
            "return [localStorage.length, Object.values(sessionStorage).some((v) => v.includes(arguments[0])), location.href];",
            vec![json!(secret)],
        )
        .await
        .unwrap();
    assert_eq!(storage[0], 0);
    assert_eq!(storage[1], false);
    assert!(
        !storage[2].as_str().unwrap().contains("hym_live_"),
        "{storage}"
    );

    // A change made meanwhile through the API arrives at the top, without a reload.
    wait_until_live(&client).await;
    client
        .execute("window.stillTheSamePage = true;", vec![])
        .await
        .unwrap();
    let pause = "mutation($id: ID!) { pauseEndpoint(endpointId: $id) { endpoint { id } } }";
    let resume = "mutation($id: ID!) { resumeEndpoint(endpointId: $id) { heldDeliveries } }";
    api(&app, &admin, pause, json!({ "id": "beta-form" })).await;
    let live = wait_for_text(
        &client,
        "#audit tr[data-operation='pauseEndpoint']",
        "beta-form",
    )
    .await;
    assert!(live.contains("Beta") && live.contains("operator"), "{live}");
    wait_for_attribute(
        &client,
        "#audit tbody tr:first-child",
        "data-operation",
        "pauseEndpoint",
    )
    .await;
    let same_page = client
        .execute("return window.stillTheSamePage === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same_page, json!(true));
    client
        .execute("window.scrollTo(0, 0);", vec![])
        .await
        .unwrap();
    shots.take(&client, "audit-trail").await;

    // Narrowed to Alpha: its entries only, listed and live.
    switch_project(&client, &alpha, "Alpha").await;
    wait_for_count(&client, "#audit tr[data-operation='createProject']", 1).await;
    let projects_shown: Vec<String> = {
        let mut shown = Vec::new();
        for cell in client
            .find_all(Locator::Css("#audit tbody td.audit-project"))
            .await
            .unwrap()
        {
            shown.push(cell.text().await.unwrap());
        }
        shown
    };
    assert!(!projects_shown.is_empty());
    assert!(
        projects_shown.iter().all(|p| p == "Alpha"),
        "{projects_shown:?}"
    );
    wait_until_live(&client).await;
    api(&app, &admin, resume, json!({ "id": "beta-form" })).await;
    api(&app, &admin, pause, json!({ "id": "alpha-form" })).await;
    wait_for_text(
        &client,
        "#audit tr[data-operation='pauseEndpoint']",
        "alpha-form",
    )
    .await;
    assert!(client
        .find_all(Locator::Css("#audit tr[data-operation='resumeEndpoint']"))
        .await
        .unwrap()
        .is_empty());
    assert!(
        client
            .find_all(Locator::Css("#audit tr[data-operation='pauseEndpoint']"))
            .await
            .unwrap()
            .len()
            == 1
    );

    // A project's own (admin) key: its project named, no choice; its project's
    // endpoints and keys only, and new keys of its project only.
    let scoped = api(
        &app,
        &admin,
        "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { key } }",
        json!({ "input": { "name": "alpha team", "role": "ADMIN", "projectId": alpha } }),
    )
    .await["createApiKey"]["key"]
        .as_str()
        .unwrap()
        .to_string();
    click(&client, "#sign-out").await;
    sign_in(&client, &console, &scoped).await;
    wait_for_text(&client, "#project-name", "Project: Alpha").await;
    assert!(client
        .find_all(Locator::Css("#project-select"))
        .await
        .unwrap()
        .is_empty());
    click(&client, "nav a[href='#/endpoints']").await;
    wait_for_count(&client, "#endpoints tbody tr", 2).await;
    click(&client, "nav a[href='#/keys']").await;
    wait_for_count(&client, "#keys tbody tr", 2).await;
    wait_for_text(&client, "#keys", "alpha team").await;
    wait_for_text(&client, "#keys", "alpha dashboard").await;
    let options = client
        .find_all(Locator::Css("#new-key-project option"))
        .await
        .unwrap();
    assert_eq!(options.len(), 1);
    assert_eq!(options[0].text().await.unwrap(), "Alpha");

    // A read key: neither the keys page nor the audit trail is offered.
    let (_, reader) = app.create_key_with_role("viewer", KeyRole::Read).await;
    click(&client, "#sign-out").await;
    sign_in(&client, &console, &reader).await;
    for link in ["nav a[href='#/keys']", "nav a[href='#/audit']"] {
        assert!(
            client
                .find_all(Locator::Css(link))
                .await
                .unwrap()
                .is_empty(),
            "{link}"
        );
    }
    client.goto(&format!("{console}#/audit")).await.unwrap();
    wait_for_text(&client, "#view .read-only", "read-only").await;
    client.close().await.unwrap();
}

/// What the page hands the browser to save when `button` is clicked: the file's text,
/// caught as the page makes it (within 10 seconds).
async fn download_of(client: &Client, button: &str) -> String {
    client
        .execute(
            "window.downloads = []; const make = URL.createObjectURL; URL.createObjectURL = (blob) => { blob.text().then((t) => window.downloads.push(t)); return make(blob); };",
            vec![],
        )
        .await
        .unwrap();
    click(client, button).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = client
            .execute("return window.downloads[0] || null;", vec![])
            .await
            .unwrap();
        if let Some(text) = got.as_str() {
            return text.to_string();
        }
        assert!(Instant::now() < deadline, "no download from {button}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
