//! What an operator relies on: JSON logs that parse and keep secrets out, the start-up
//! rules of `serve`, its `--help`, and the systemd unit of docs/operations.md.

use std::collections::BTreeSet;
use std::sync::Arc;

use hymical_forms::testing::clock::SystemClock;
use serde_json::Value;

use support::harness::{forms_command, wait_for_status, ServeProcess, TestApp};
use support::receiver::Receiver;

/// A whole cycle (a post, a delivery, a failure, a GraphQL call) with JSON logs: every line
/// is one JSON object with the stable keys, lines carry the ids, and nothing submitted, no
/// key, secret, password or client address appears.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_parse_carry_ids_and_keep_secrets_out() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    let secret = app.webhook_endpoint("logged", &receiver.url("/ok")).await;
    app.webhook_endpoint("broken", &receiver.url("/status/500"))
        .await;
    let (_, key) = app.create_key("logs").await;
    let serve = ServeProcess::start(
        &app.db,
        &[
            ("FORMS_LOG_FORMAT", "json"),
            ("RUST_LOG", "debug"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "1"),
        ],
    );
    wait_for_status(&serve.url("/health"), 200).await;
    // The client posts from 127.0.0.2, an address nothing else in this test uses.
    let client = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    for endpoint in ["logged", "broken"] {
        let response = support::harness::post_urlencoded(
            &client,
            serve.url(&format!("/f/{endpoint}")),
            "zanzibarfield=quetzalcoatlvalue&email=hiddenmailbox%40example.org",
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 202);
    }
    let response = client
        .post(serve.url("/graphql"))
        .bearer_auth(&key)
        .json(&serde_json::json!({ "query": "{ deliveryCounts { delivered } }" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    app.db
        .wait_for_deliveries(60, |rows| {
            rows.len() == 2
                && rows
                    .iter()
                    .all(|d| d.state == "delivered" || d.state == "failed")
        })
        .await;
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");

    let password = app.db.password();
    let forbidden = [
        "zanzibarfield",
        "quetzalcoatlvalue",
        "hiddenmailbox",
        "127.0.0.2",
        key.as_str(),
        secret.as_str(),
        password.as_str(),
    ];
    let mut messages = BTreeSet::new();
    let mut saw_delivery_ids = false;
    let mut saw_request_ids = false;
    for line in log.lines() {
        let object: Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not one JSON object ({error}): {line}"));
        for required in ["timestamp", "level", "target", "message"] {
            assert!(object.get(required).is_some(), "no {required}: {line}");
        }
        for secret in forbidden {
            assert!(!line.contains(secret), "{secret:?} in a log line: {line}");
        }
        messages.insert(object["message"].as_str().unwrap_or_default().to_string());
        if object.get("delivery_id").is_some() && object.get("submission_id").is_some() {
            saw_delivery_ids = true;
        }
        if object["span"]["request_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
        {
            saw_request_ids = true;
        }
        if object["message"] == "delivery failed: no attempts left in this cycle" {
            assert_eq!(object["level"], "WARN", "{line}");
        }
    }
    assert!(
        saw_delivery_ids,
        "no line with delivery and submission ids: {log}"
    );
    assert!(
        saw_request_ids,
        "no request line with its request id: {log}"
    );
    assert!(
        messages.contains("delivery failed: no attempts left in this cycle"),
        "{messages:?}"
    );
}

/// Both roles off is a configuration error: status 2, one message, and nothing started
/// (no embedded cluster created).
#[test]
fn serve_with_both_roles_off_exits_2_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let output = forms_command(dir.path())
        .env("FORMS_API_ENABLED", "false")
        .env("FORMS_WORKER_ENABLED", "false")
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("would do nothing").count(), 1, "{stderr}");
    assert!(
        !dir.path().join(".hymical").exists(),
        "the embedded cluster was started"
    );
}

/// An error at start-up is printed once.
#[test]
fn a_start_up_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let output = forms_command(dir.path())
        .env(
            "FORMS_DATABASE_URL",
            "postgres://nobody:wrong@127.0.0.1:1/none",
        )
        .env("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "2")
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        !stderr.contains("wrong"),
        "the password was printed: {stderr}"
    );
    assert!(
        !stderr.contains("\u{1b}["),
        "colour codes on a pipe: {stderr}"
    );
}

/// `serve --help` lists every variable of the reference with its default.
#[test]
fn serve_help_lists_the_environment_variables() {
    let dir = tempfile::tempdir().unwrap();
    let output = forms_command(dir.path())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for variable in hymical_forms::testing::config::Config::known_variables() {
        assert!(
            help.contains(variable),
            "{variable} missing from serve --help:\n{help}"
        );
    }
    assert!(
        help.contains("FORMS_BIND [default: 127.0.0.1:8080]"),
        "{help}"
    );
}

/// The unit in docs/examples is the one docs/operations.md shows, and systemd accepts it.
#[test]
fn the_systemd_unit_verifies() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = std::fs::read_to_string(root.join("docs/examples/hymical-forms.service")).unwrap();
    let operations = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    assert!(
        operations.contains(&format!("```ini\n{unit}```")),
        "docs/operations.md does not show docs/examples/hymical-forms.service as it is"
    );
    let version = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .expect(
            "systemd-analyze is not installed: apt-get install systemd (`cargo xtask setup` does)",
        );
    assert!(version.status.success());
    // Verified with this build's binary in place of the installed path.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hymical-forms.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/hymical-forms",
            env!("CARGO_BIN_EXE_hymical-forms"),
        ),
    )
    .unwrap();
    let output = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success() && said.trim().is_empty(), "{said}");
}
