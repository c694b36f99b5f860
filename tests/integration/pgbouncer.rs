//! A whole cycle through PgBouncer in session mode (Debian's `pgbouncer`, the real
//! program): intake, delivery, and a subscription that needs the `LISTEN` connection.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use hymical_forms::testing::clock::SystemClock;
use hymical_forms::testing::config::Secret;

use support::harness::{free_port, wait_for_status, ServeProcess, TestApp, TestDb};
use support::receiver::Receiver;
use support::ws_client::{expected as t, transition, WsClient};

fn pgbouncer_binary() -> PathBuf {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .expect("pgbouncer is not installed: apt-get install pgbouncer (`cargo xtask setup` does)")
}

struct PgBouncer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// PgBouncer in session mode in front of the test server, authenticating as the test
    /// role with SCRAM, run as `postgres` when we are root (it refuses to run as root).
    async fn start(db: &TestDb) -> PgBouncer {
        let url = url::Url::parse(db.url.expose()).expect("database URL");
        let user = url.username().to_string();
        let password = url.password().expect("password").to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let config = format!(
            "[databases]
* = host=127.0.0.1 port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {dir}/users.txt
pool_mode = session
max_client_conn = 200
default_pool_size = 40
ignore_startup_parameters = extra_float_digits
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
",
            server_port = db.server_addr().port(),
            dir = dir.path().display(),
        );
        write(dir.path(), "pgbouncer.ini", &config);
        write(
            dir.path(),
            "users.txt",
            &format!("\"{user}\" \"{password}\"\n"),
        );
        let mut command = Command::new(pgbouncer_binary());
        command
            .arg(dir.path().join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if nix::unistd::geteuid().is_root() {
            let postgres = nix::unistd::User::from_name("postgres")
                .ok()
                .flatten()
                .expect("a postgres user");
            // Its log and pid file are written in the directory.
            std::os::unix::fs::chown(
                dir.path(),
                Some(postgres.uid.as_raw()),
                Some(postgres.gid.as_raw()),
            )
            .expect("chown");
            command
                .uid(postgres.uid.as_raw())
                .gid(postgres.gid.as_raw());
        }
        let child = command.spawn().expect("start pgbouncer");
        let bouncer = PgBouncer { child, port, dir };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return bouncer;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("pgbouncer did not listen: {}", bouncer.log());
    }

    fn url(&self, db: &TestDb) -> Secret {
        db.url_through(std::net::SocketAddr::from(([127, 0, 0, 1], self.port)))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write(dir: &Path, name: &str, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_cycle_through_pgbouncer_in_session_mode() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    app.webhook_endpoint("bounced", &receiver.url("/status/200"))
        .await;
    let (_, key) = app.create_key("bouncer").await;
    let bouncer = PgBouncer::start(&app.db).await;
    let through = bouncer.url(&app.db);
    let serve = ServeProcess::start(
        &app.db,
        &[
            ("FORMS_DATABASE_URL", through.expose()),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            // Only a notification can wake the workers in time.
            ("FORMS_WORKER_POLL_SECONDS", "3600"),
        ],
    );
    wait_for_status(&serve.url("/ready"), 200).await;

    let after = app.db.newest_event_id().await;
    let mut subscriber =
        WsClient::ready(&format!("ws://127.0.0.1:{}/graphql/ws", serve.port), &key).await;
    subscriber
        .subscribe_events("s", &format!("afterEventId: \"{after}\""))
        .await;
    let response =
        support::harness::post_urlencoded(&reqwest::Client::new(), serve.url("/f/bounced"), "a=1")
            .await
            .unwrap();
    assert_eq!(response.status(), 202);
    let events = subscriber.events("s", 3).await;
    assert_eq!(
        events.iter().map(transition).collect::<Vec<_>>(),
        vec![
            t("PENDING", "null", "CREATED"),
            t("PROCESSING", "PENDING", "CLAIMED"),
            t("DELIVERED", "PROCESSING", "ATTEMPT_RECORDED"),
        ]
    );
    assert_eq!(receiver.received().len(), 1);
    // The workers were woken through the LISTEN connection (the poll is an hour): so is
    // the next one.
    let response =
        support::harness::post_urlencoded(&reqwest::Client::new(), serve.url("/f/bounced"), "a=2")
            .await
            .unwrap();
    assert_eq!(response.status(), 202);
    subscriber.events("s", 3).await;
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");
    let bouncer_log = bouncer.log();
    assert!(
        bouncer_log.contains("login attempt"),
        "no client went through pgbouncer: {bouncer_log}"
    );
}
