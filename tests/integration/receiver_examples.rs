//! The receiver programs of docs/receiving-webhooks.md (Python, Node.js, Rust), run as they
//! are against a real delivery: each verifies the signature, processes the submission, and
//! recognises its replay as a duplicate; a forged request is rejected.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use serde_json::{json, Value};

use support::harness::{free_port, ServeProcess, TestApp};

struct Program {
    child: Child,
    port: u16,
    lines: mpsc::Receiver<Value>,
}

impl Program {
    fn start(mut command: Command, secret: &str) -> Program {
        let port = free_port();
        command
            .env("WEBHOOK_SECRET", secret)
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().expect("start the receiver program");
        let (sender, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str(&line) {
                    let _ = sender.send(value);
                }
            }
        });
        Program { child, port, lines }
    }

    async fn wait_listening(&self) {
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the receiver program never listened on {}", self.port);
    }

    fn next_report(&self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a report line from the receiver program")
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/receivers")
}

/// The Rust receiver, `examples/receiver.rs`, as `cargo test` built it.
fn rust_receiver() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    // target/<profile>/deps/integration-… → target/<profile>/examples/receiver
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let path = profile.join("examples").join("receiver");
    assert!(
        path.is_file(),
        "{} not built (cargo test builds examples)",
        path.display()
    );
    path
}

async fn exercise(name: &str, command: Command) {
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("receivers").await;
    // The endpoint's secret is known before the program starts; its URL after.
    let secret = support::harness::webhook_secret();
    let program = Program::start(command, &secret);
    program.wait_listening().await;
    let endpoint = support::harness::endpoint("receiver-example");
    let url = format!("http://127.0.0.1:{}/hooks/forms", program.port);
    app.insert_endpoint_with(
        &endpoint,
        support::harness::webhook(&endpoint, url, secret.clone()),
    )
    .await;

    let worker = ServeProcess::start(
        &app.db,
        &[
            ("FORMS_API_ENABLED", "false"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
        ],
    );
    let submission = app
        .submit(
            "receiver-example",
            "email=reader%40example.com&topic=r%C3%A9sum%C3%A9",
        )
        .await;
    let first = program.next_report();
    assert_eq!(first["event"], "processed", "{name}: {first}");
    assert_eq!(first["submission_id"], submission.as_str(), "{name}");
    assert_eq!(
        first["fields"],
        json!({ "email": ["reader@example.com"], "topic": ["résumé"] }),
        "{name}"
    );
    let delivered = app
        .db
        .wait_for_deliveries(60, |rows| rows.iter().all(|d| d.state == "delivered"))
        .await;

    // As if the first answer had been lost: the delivery is failed and replayed, and the
    // same bytes arrive again.
    let mut conn = app.db.connect().await;
    diesel::sql_query("UPDATE webhook_deliveries SET state = 'failed' WHERE id = $1")
        .bind::<Text, _>(&delivered[0].id)
        .execute(&mut conn)
        .await
        .unwrap();
    let replay = app
        .gql(
            &key,
            "mutation($id: ID!) { replayDelivery(id: $id) { delivery { state } } }",
            json!({ "id": delivered[0].id }),
        )
        .await;
    assert!(replay["errors"].is_null(), "{name}: {replay}");
    let second = program.next_report();
    assert_eq!(second["event"], "duplicate", "{name}: {second}");
    assert_eq!(second["submission_id"], submission.as_str(), "{name}");
    app.db
        .wait_for_deliveries(60, |rows| rows.iter().all(|d| d.state == "delivered"))
        .await;

    // A request signed with another secret is refused and not processed.
    let body = json!({ "type": "submission.received", "submission": { "id": "sub_forged", "fields": {} } })
        .to_string();
    let response = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/hooks/forms", program.port))
        .header("content-type", "application/json")
        .header("hymical-signature", format!("v1={}", "0".repeat(64)))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401, "{name}");
    assert_eq!(program.next_report()["event"], "rejected", "{name}");
    let (status, log) = worker.stop();
    assert!(status.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_receiver_verifies_and_deduplicates() {
    let mut command = Command::new("python3");
    command.arg(examples_dir().join("receiver.py"));
    exercise("python", command).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_node_receiver_verifies_and_deduplicates() {
    let mut command = Command::new("node");
    command.arg(examples_dir().join("receiver.mjs"));
    exercise("node", command).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rust_receiver_verifies_and_deduplicates() {
    exercise("rust", Command::new(rust_receiver())).await;
}

/// docs/receiving-webhooks.md prints the three programs exactly as they are run here.
#[test]
fn the_documented_receivers_are_the_tested_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/receiving-webhooks.md")).unwrap();
    for (fence, path) in [
        ("python", "docs/examples/receivers/receiver.py"),
        ("javascript", "docs/examples/receivers/receiver.mjs"),
        ("rust", "examples/receiver.rs"),
    ] {
        let program = std::fs::read_to_string(root.join(path)).unwrap();
        assert!(
            doc.contains(&format!("```{fence}\n{program}```")),
            "docs/receiving-webhooks.md does not print {path} as it is"
        );
    }
}
