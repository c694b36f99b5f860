//! Third-party Standard Webhooks verifiers, run over requests a real receiver got: the npm
//! packages `standardwebhooks` and `svix` (by node, tests/webhook-verifiers/verify.mjs) and
//! the PyPI package `standardwebhooks` (in a venv this module makes,
//! tests/webhook-verifiers/verify.py). Their versions are pinned in that directory.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{json, Value};

use support::receiver::Received;

/// Which verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// npm `standardwebhooks`.
    NodeStandard,
    /// npm `svix`, `Webhook.verify`.
    Svix,
    /// PyPI `standardwebhooks`.
    PythonStandard,
}

pub const ALL: [Library; 3] = [
    Library::NodeStandard,
    Library::Svix,
    Library::PythonStandard,
];

/// One request to verify: its exact body and the three Standard Webhooks headers.
#[derive(Debug, Clone)]
pub struct Case {
    pub secret: String,
    pub body: Vec<u8>,
    pub headers: Value,
}

impl Case {
    pub fn of(request: &Received, secret: &str) -> Case {
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        Case {
            secret: secret.to_string(),
            body: request.body.to_vec(),
            headers: json!({
                "webhook-id": header("webhook-id"),
                "webhook-timestamp": header("webhook-timestamp"),
                "webhook-signature": header("webhook-signature"),
            }),
        }
    }
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/webhook-verifiers")
}

/// `npm ci` once per test run.
fn node_ready() -> PathBuf {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY
        .get_or_init(|| {
            support::harness::npm_installed("webhook-verifiers", &["standardwebhooks", "svix"])
        })
        .clone()
}

/// A venv with the pinned `standardwebhooks`, made once (under the target directory).
fn python_ready() -> PathBuf {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY
        .get_or_init(|| {
            let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("standardwebhooks-venv");
            let python = venv.join("bin/python");
            let installed = Command::new(&python)
                .args(["-c", "import standardwebhooks"])
                .output()
                .is_ok_and(|output| output.status.success());
            if !installed {
                let made = Command::new("python3")
                    .args(["-m", "venv"])
                    .arg(&venv)
                    .output()
                    .expect("python3 is needed for the webhook verifier tests");
                assert!(
                    made.status.success(),
                    "python3 -m venv failed (Debian: apt-get install python3-venv): {}",
                    String::from_utf8_lossy(&made.stderr)
                );
                let pip = Command::new(&python)
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                        "-r",
                    ])
                    .arg(dir().join("requirements.txt"))
                    .output()
                    .expect("pip runs");
                assert!(
                    pip.status.success(),
                    "pip install standardwebhooks failed: {}",
                    String::from_utf8_lossy(&pip.stderr)
                );
            }
            python
        })
        .clone()
}

fn run(mut command: Command, lines: &[Value]) -> Vec<Result<(), String>> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the verifier starts");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for line in lines {
            writeln!(stdin, "{line}").expect("write a case");
        }
    }
    let output = child.wait_with_output().expect("the verifier ends");
    assert!(
        output.status.success(),
        "verifier failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Vec<Result<(), String>> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let answer: Value = serde_json::from_str(line).expect("a JSON answer");
            if answer["ok"] == true {
                Ok(())
            } else {
                Err(answer["error"].as_str().unwrap_or("refused").to_string())
            }
        })
        .collect();
    assert_eq!(answers.len(), lines.len(), "one answer per case");
    answers
}

/// Each case as `library` judges it: `Ok` when it verifies, else the library's reason.
pub async fn verify(library: Library, cases: Vec<Case>) -> Vec<Result<(), String>> {
    tokio::task::spawn_blocking(move || {
        let lines: Vec<Value> = cases
            .iter()
            .map(|case| {
                json!({
                    "library": if library == Library::Svix { "svix" } else { "standardwebhooks" },
                    "secret": case.secret,
                    "body_base64": base64::engine::general_purpose::STANDARD.encode(&case.body),
                    "headers": case.headers,
                })
            })
            .collect();
        match library {
            Library::NodeStandard | Library::Svix => {
                let mut command = Command::new("node");
                command.arg("verify.mjs").current_dir(node_ready());
                run(command, &lines)
            }
            Library::PythonStandard => {
                let mut command = Command::new(python_ready());
                command.arg(dir().join("verify.py"));
                run(command, &lines)
            }
        }
    })
    .await
    .expect("the verifier task")
}

/// Whether every library verifies `case`.
pub async fn all_verify(case: &Case) -> Vec<(Library, Result<(), String>)> {
    let mut answers = Vec::new();
    for library in ALL {
        let answer = verify(library, vec![case.clone()]).await.remove(0);
        answers.push((library, answer));
    }
    answers
}
