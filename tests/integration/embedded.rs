//! The two-command start: with no configuration, `serve` creates, starts and migrates a
//! private PostgreSQL cluster, prints one management key, and stops the cluster on exit.
//! A second start reuses the cluster and its data. Run as root (the cluster then runs as
//! `postgres`) and as an ordinary user.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;

use crate::harness::{free_port, wait_for_status};

struct Serve {
    child: Child,
    port: u16,
    stdout: mpsc::Receiver<String>,
}

fn start(dir: &Path, user: Option<&nix::unistd::User>) -> Serve {
    let port = free_port();
    // The binary is run from inside `dir`, so an unprivileged user can execute it whatever
    // the permissions of the checkout it was built in.
    let binary = dir.join("hymical-forms");
    if !binary.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_hymical-forms"), &binary).expect("copy binary");
    }
    let mut command = std::process::Command::new(&binary);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("FORMS_BIND", format!("127.0.0.1:{port}"))
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(user) = user {
        command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    }
    let mut child = command.spawn().expect("start hymical-forms");
    let (sender, stdout) = mpsc::channel();
    let pipe = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    Serve {
        child,
        port,
        stdout,
    }
}

impl Serve {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Everything printed so far.
    fn printed(&self) -> Vec<String> {
        self.stdout.try_iter().collect()
    }

    fn stop(mut self) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "graceful exit: {status}");
    }
}

async fn graphql_status(serve: &Serve, key: &str) -> u16 {
    reqwest::Client::new()
        .post(serve.url("/graphql"))
        .header("authorization", format!("Bearer {key}"))
        .json(&json!({"query": "{ __typename }"}))
        .send()
        .await
        .expect("graphql")
        .status()
        .as_u16()
}

fn wait_until_stopped(data_dir: &Path) {
    let pid_file = data_dir.join("pgdata").join("postmaster.pid");
    for _ in 0..200 {
        if !pid_file.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the embedded PostgreSQL server is still running after serve exited");
}

async fn two_starts(user: Option<nix::unistd::User>) {
    let dir = tempfile::tempdir().unwrap();
    if let Some(user) = &user {
        std::os::unix::fs::chown(dir.path(), Some(user.uid.as_raw()), Some(user.gid.as_raw()))
            .unwrap();
    }
    let data_dir = dir.path().join(".hymical");

    let first = start(dir.path(), user.as_ref());
    wait_for_status(&first.url("/health"), 200).await;
    wait_for_status(&first.url("/ready"), 200).await;
    let printed = first.printed();
    let keys: Vec<&str> = printed
        .iter()
        .filter_map(|l| l.trim().strip_prefix("key: "))
        .collect();
    assert_eq!(keys.len(), 1, "exactly one key printed: {printed:?}");
    let key = keys[0].to_string();
    assert_eq!(graphql_status(&first, &key).await, 200);
    assert_eq!(graphql_status(&first, "hym_live_wrong").await, 401);
    first.stop();
    wait_until_stopped(&data_dir);

    let second = start(dir.path(), user.as_ref());
    wait_for_status(&second.url("/ready"), 200).await;
    assert_eq!(
        graphql_status(&second, &key).await,
        200,
        "the first key survives a restart"
    );
    let printed = second.printed();
    assert!(
        !printed.iter().any(|l| l.contains("key: ")),
        "no second key on a reused cluster: {printed:?}"
    );
    second.stop();
    wait_until_stopped(&data_dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_cluster_as_the_current_user() {
    two_starts(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_cluster_as_an_ordinary_user() {
    if !nix::unistd::geteuid().is_root() {
        // Already an ordinary user: `embedded_cluster_as_the_current_user` covers it.
        eprintln!("not root: the current-user test is the ordinary-user case");
        return;
    }
    let nobody = nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("a `nobody` user");
    two_starts(Some(nobody)).await;
}
