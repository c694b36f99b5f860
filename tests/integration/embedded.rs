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

use support::harness::{free_port, wait_for_status};

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
        .stderr(std::fs::File::create(dir.join("serve.stderr")).expect("stderr file"));
    if let Some(user) = user {
        command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    }
    // Another test's fork (they spawn processes on other threads) can still hold the copy's
    // write descriptor for a moment, until its child execs; exec answers "text file busy"
    // meanwhile. Bounded retries, as for any freshly written executable in a threaded test.
    let mut tries = 0;
    let mut child = loop {
        match command.spawn() {
            Err(error) if error.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            spawned => break spawned.expect("start hymical-forms"),
        }
    };
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

/// As root from a directory the `postgres` user cannot reach (a checkout under a 0700
/// home), the first command still works: the cluster lives under /var/lib/hymical-forms,
/// the log says where, the requested directory is left untouched, and a second start
/// finds the same cluster.
#[tokio::test(flavor = "multi_thread")]
async fn embedded_cluster_as_root_from_a_private_directory() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: the cluster runs as this user, who can reach its own directory");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let checkout = home.path().join("checkout");
    std::fs::create_dir(&checkout).unwrap();

    let first = start(&checkout, None);
    wait_for_status(&first.url("/ready"), 200).await;
    let key = first
        .printed()
        .iter()
        .find_map(|l| l.trim().strip_prefix("key: ").map(str::to_string))
        .expect("a key printed");
    assert_eq!(graphql_status(&first, &key).await, 200);
    first.stop();
    let log = std::fs::read_to_string(checkout.join("serve.stderr")).unwrap();
    let relocated = log
        .lines()
        .find(|line| line.contains("the postgres user cannot reach"))
        .and_then(|line| line.split("data_dir=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("the log does not say where the cluster lives: {log}"));
    assert!(
        relocated.starts_with("/var/lib/hymical-forms"),
        "{relocated:?}"
    );
    assert_eq!(
        log.lines()
            .filter(|line| line.contains("cannot reach"))
            .count(),
        1,
        "announced once: {log}"
    );
    assert!(
        !checkout.join(".hymical").exists(),
        "the unreachable directory was used"
    );
    wait_until_stopped(&relocated);

    let second = start(&checkout, None);
    wait_for_status(&second.url("/ready"), 200).await;
    assert_eq!(
        graphql_status(&second, &key).await,
        200,
        "the same cluster again"
    );
    second.stop();
    wait_until_stopped(&relocated);
    std::fs::remove_dir_all(&relocated).unwrap();
}

/// What an interrupted first start leaves (initdb's half-written directory) is cleared by
/// the next start, which then works: nothing has to be removed by hand.
#[tokio::test(flavor = "multi_thread")]
async fn a_first_start_that_was_interrupted_is_begun_again() {
    let dir = tempfile::tempdir().unwrap();
    let partial = dir.path().join(".hymical").join("pgdata.partial");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join("PG_VERSION"), "15\n").unwrap();
    std::fs::write(partial.join("half-written"), "").unwrap();
    let serve = start(dir.path(), None);
    wait_for_status(&serve.url("/ready"), 200).await;
    assert!(!partial.exists(), "the leftover is still there");
    serve.stop();
    wait_until_stopped(&dir.path().join(".hymical"));
}
