//! The binary's start-up rules against an operator's database: configuration errors,
//! pending migrations, `migrate`, and `FORMS_AUTO_MIGRATE` with several processes.

use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;

use support::harness::{forms_command, free_port, wait_for_status, TestDb};

#[test]
fn an_invalid_variable_stops_the_process_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let output = forms_command(dir.path())
        .env("FORMS_WORKER_LEASE_SECONDS", "12")
        .env("FORMS_MAX_FIELDS", "none")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("FORMS_WORKER_LEASE_SECONDS"), "{stderr}");
    assert!(stderr.contains("must exceed"), "{stderr}");
    assert!(stderr.contains("FORMS_MAX_FIELDS"), "{stderr}");
    assert!(!dir.path().join(".hymical").exists(), "nothing started");
}

/// Every URL-valued setting given a value its documented rule refuses stops the binary
/// with status 2, naming that setting, before anything starts (an Akismet URL that its
/// rule refused was once taken). src/config/mod.rs tests each rule in full, the
/// values taken as well as those refused.
#[test]
fn a_url_setting_that_breaks_its_rule_exits_2_naming_it() {
    const ALERT_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    /// A setting, a value its rule refuses, and the other settings it needs to be read.
    type Case = (
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    );
    let cases: &[Case] = &[
        ("FORMS_DATABASE_URL", "mysql://u:p@127.0.0.1/forms", &[]),
        (
            "FORMS_DATABASE_READ_URL",
            "http://127.0.0.1/forms",
            &[("FORMS_DATABASE_URL", "postgres://u:p@127.0.0.1:1/forms")],
        ),
        (
            "FORMS_ALERT_WEBHOOK_URL",
            "ftp://alerts.example.com/hook",
            &[("FORMS_ALERT_WEBHOOK_SECRET", ALERT_SECRET)],
        ),
        (
            "FORMS_CAPTCHA_TURNSTILE_VERIFY_URL",
            "ftp://verify.example",
            &[],
        ),
        ("FORMS_CAPTCHA_HCAPTCHA_VERIFY_URL", "not a url", &[]),
        ("FORMS_CAPTCHA_RECAPTCHA_VERIFY_URL", "http://", &[]),
        (
            "FORMS_AKISMET_URL",
            "https://rest.akismet.com/1.1/?blog=x",
            &[],
        ),
        ("FORMS_AKISMET_URL", "rest.akismet.com/1.1/", &[]),
        ("FORMS_PUBLIC_URL", "https://forms.example.com/#top", &[]),
        (
            "FORMS_S3_ENDPOINT",
            "s3.example.com",
            &[
                ("FORMS_S3_BUCKET", "forms"),
                ("FORMS_S3_ACCESS_KEY_ID", "id"),
                ("FORMS_S3_SECRET_ACCESS_KEY", "hunter2"),
            ],
        ),
    ];
    for (variable, value, with) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut command = forms_command(dir.path());
        command.env(variable, value);
        for (name, other) in *with {
            command.env(name, other);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{variable}={value:?}: {stderr}"
        );
        assert!(stderr.contains("invalid configuration"), "{stderr}");
        let named: Vec<&str> = stderr
            .lines()
            .filter_map(|line| line.trim().split(':').next())
            .filter(|name| name.starts_with("FORMS_"))
            .collect();
        assert_eq!(named, [*variable], "{variable}={value:?}: {stderr}");
        assert!(!dir.path().join(".hymical").exists(), "nothing started");
    }
}

#[test]
fn the_database_password_is_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let output = forms_command(dir.path())
        .env(
            "FORMS_DATABASE_URL",
            "postgres://forms:hunter2-secret@127.0.0.1:1/forms",
        )
        .args(["migrate", "--status"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!all.contains("hunter2"), "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_refuses_pending_migrations_and_migrate_applies_them() {
    let db = TestDb::empty().await;
    let dir = tempfile::tempdir().unwrap();
    let output = forms_command(dir.path())
        .env("FORMS_DATABASE_URL", db.url.expose())
        .env("FORMS_BIND", format!("127.0.0.1:{}", free_port()))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("pending migration"), "{stderr}");
    assert!(stderr.contains("hymical-forms migrate"), "{stderr}");

    let status = db.run_cli(&["migrate", "--status"]);
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(stdout.lines().all(|l| l.starts_with("pending")), "{stdout}");

    let migrate = db.run_cli(&["migrate"]);
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let status = db.run_cli(&["migrate", "--status"]);
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(
        !stdout.is_empty() && stdout.lines().all(|l| l.starts_with("applied")),
        "{stdout}"
    );
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_migrate_with_several_processes_migrates_once() {
    let db = TestDb::empty().await;
    let dir = tempfile::tempdir().unwrap();
    let mut children = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        ports.push(port);
        children.push(
            forms_command(dir.path())
                .env("FORMS_DATABASE_URL", db.url.expose())
                .env("FORMS_AUTO_MIGRATE", "true")
                .env("FORMS_DATABASE_POOL_SIZE", "2")
                .env("FORMS_BIND", format!("127.0.0.1:{port}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    for port in &ports {
        wait_for_status(&format!("http://127.0.0.1:{port}/ready"), 200).await;
    }
    for child in &mut children {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "graceful exit on SIGTERM: {status}");
    }
    let mut conn = db.connect().await;
    let applied: Count = diesel::sql_query("SELECT count(*) AS n FROM __diesel_schema_migrations")
        .get_result(&mut conn)
        .await
        .unwrap();
    let embedded = hymical_forms::testing::db::migrations::status(&db.url)
        .await
        .unwrap();
    assert_eq!(applied.n as usize, embedded.len());
    assert!(embedded.iter().all(|m| m.applied));
}
