//! PostgreSQL over TLS: a cluster of its own with a certificate from an authority the test
//! makes (rcgen); each `sslmode` connects or is refused as libpq's would, with a message
//! that says why; a `serve` process's pool and its LISTEN connection both use TLS, as the
//! server itself reports in `pg_stat_ssl`.

use std::path::{Path, PathBuf};

use diesel::sql_types::{Bool, Text};
use diesel_async::RunQueryDsl;
use hymical_forms::testing::config::Secret;
use hymical_forms::testing::db::ConnectionSettings;
use hymical_forms::testing::embedded;

use support::harness::{wait_for_status, ServeProcess, TestDb};

struct Authority {
    cert_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn authority(name: &str) -> Authority {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Authority {
        cert_pem: cert.pem(),
        issuer: rcgen::Issuer::new(params, key),
    }
}

/// A TLS cluster whose certificate names only `localhost`, signed by `ca`.
struct TlsCluster {
    _running: Option<embedded::RunningServer>,
    url: Secret,
    dir: tempfile::TempDir,
}

fn start_cluster(ca: &Authority) -> TlsCluster {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let cert_path = certs.join("server.crt");
    let key_path = certs.join("server.key");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    give_to_server_user(&[&certs, &cert_path, &key_path]);

    let cluster = embedded::Cluster::new(&dir.path().join("cluster")).unwrap();
    cluster.initialize().unwrap();
    let mut settings = embedded::ServerSettings::throwaway();
    settings.remove_after_stop = false;
    for (name, value) in [
        ("ssl", "on".to_string()),
        ("ssl_cert_file", cert_path.display().to_string()),
        ("ssl_key_file", key_path.display().to_string()),
    ] {
        settings.extra.push((name.to_string(), value));
    }
    let (started, connection) = cluster.ensure_running(&settings).unwrap();
    let running = match started {
        embedded::Started::ByUs(running) => Some(running),
        embedded::Started::AlreadyRunning => None,
    };
    TlsCluster {
        _running: running,
        url: connection.url("postgres"),
        dir,
    }
}

/// The key must belong to the user the server runs as, mode 0600.
fn give_to_server_user(paths: &[&Path]) {
    use std::os::unix::fs::PermissionsExt;
    for path in paths {
        let mode = if path.is_dir() { 0o700 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    if nix::unistd::geteuid().is_root() {
        let postgres = nix::unistd::User::from_name("postgres").unwrap().unwrap();
        for path in paths {
            std::os::unix::fs::chown(
                path,
                Some(postgres.uid.as_raw()),
                Some(postgres.gid.as_raw()),
            )
            .unwrap();
        }
    }
}

impl TlsCluster {
    /// The cluster's URL with `host` and these query parameters.
    fn url_with(&self, host: &str, query: &str) -> Secret {
        let mut url = url::Url::parse(self.url.expose()).unwrap();
        url.set_host(Some(host)).unwrap();
        url.set_query(if query.is_empty() { None } else { Some(query) });
        Secret::new(url.to_string())
    }

    fn ca_file(&self, ca: &Authority, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, &ca.cert_pem).unwrap();
        path
    }
}

#[derive(diesel::QueryableByName)]
struct Ssl {
    #[diesel(sql_type = Bool)]
    ssl: bool,
}

/// Connects as the service does; `Ok(whether the session is encrypted)` or the error text.
async fn connect(url: &Secret) -> Result<bool, String> {
    let settings = ConnectionSettings::admin(url).map_err(|e| e.to_string())?;
    let mut connection = settings.connect().await.map_err(|e| e.to_string())?;
    let ssl: Ssl = diesel::sql_query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .get_result(&mut connection)
        .await
        .map_err(|e| e.to_string())?;
    Ok(ssl.ssl)
}

#[tokio::test(flavor = "multi_thread")]
async fn each_sslmode_connects_or_is_refused_as_libpq_would() {
    let ca = authority("Hymical test CA");
    let other = authority("Someone else's CA");
    let cluster = start_cluster(&ca);
    let trusted = cluster.ca_file(&ca, "ca.pem");
    let untrusted = cluster.ca_file(&other, "other.pem");
    let root = |path: &Path| format!("sslrootcert={}", path.display());

    // verify-full: the chain and the name.
    let full = format!("sslmode=verify-full&{}", root(&trusted));
    assert_eq!(
        connect(&cluster.url_with("localhost", &full)).await,
        Ok(true)
    );
    let wrong_name = connect(&cluster.url_with("127.0.0.1", &full))
        .await
        .unwrap_err();
    assert!(
        wrong_name.contains("certificate not valid for name"),
        "{wrong_name}"
    );
    let unknown_ca = format!("sslmode=verify-full&{}", root(&untrusted));
    let error = connect(&cluster.url_with("localhost", &unknown_ca))
        .await
        .unwrap_err();
    assert!(
        error.contains("certificate") && error.contains("UnknownIssuer"),
        "{error}"
    );
    // The built-in public roots do not know a private authority either.
    let error = connect(&cluster.url_with("localhost", "sslmode=verify-full"))
        .await
        .unwrap_err();
    assert!(error.contains("UnknownIssuer"), "{error}");

    // verify-ca: the chain, any name.
    let ca_only = format!("sslmode=verify-ca&{}", root(&trusted));
    assert_eq!(
        connect(&cluster.url_with("127.0.0.1", &ca_only)).await,
        Ok(true)
    );
    let error = connect(&cluster.url_with(
        "127.0.0.1",
        &format!("sslmode=verify-ca&{}", root(&untrusted)),
    ))
    .await
    .unwrap_err();
    assert!(error.contains("UnknownIssuer"), "{error}");

    // require: encrypted, nothing checked; prefer (the default) encrypts when offered.
    assert_eq!(
        connect(&cluster.url_with("127.0.0.1", "sslmode=require")).await,
        Ok(true)
    );
    assert_eq!(connect(&cluster.url_with("127.0.0.1", "")).await, Ok(true));
    // disable: in the clear.
    assert_eq!(
        connect(&cluster.url_with("127.0.0.1", "sslmode=disable")).await,
        Ok(false)
    );
    // require against a server without TLS is refused; prefer falls back.
    let plain = TestDb::new().await;
    let mut url = url::Url::parse(plain.url.expose()).unwrap();
    url.set_query(Some("sslmode=require"));
    let error = connect(&Secret::new(url.to_string())).await.unwrap_err();
    assert!(
        error.to_lowercase().contains("tls") || error.contains("SSL"),
        "{error}"
    );
    url.set_query(Some("sslmode=prefer"));
    assert_eq!(connect(&Secret::new(url.to_string())).await, Ok(false));
}

#[derive(diesel::QueryableByName, Debug)]
struct Session {
    #[diesel(sql_type = Bool)]
    ssl: bool,
    #[diesel(sql_type = Text)]
    query: String,
}

/// A `serve` process on a verify-full URL: every connection it holds, the pool's and the
/// LISTEN one, is encrypted; an unknown authority stops it at start with a clear message.
#[tokio::test(flavor = "multi_thread")]
async fn serve_uses_tls_for_the_pool_and_the_listener() {
    let ca = authority("Hymical test CA");
    let cluster = start_cluster(&ca);
    let trusted = cluster.ca_file(&ca, "ca.pem");
    let url = cluster.url_with(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", trusted.display()),
    );
    let db = TestDb::external("tls", url.clone());
    let serve = ServeProcess::start(&db, &[("FORMS_AUTO_MIGRATE", "true")]);
    wait_for_status(&serve.url("/ready"), 200).await;
    // Let the pool open a few connections.
    for _ in 0..5 {
        wait_for_status(&serve.url("/ready"), 200).await;
    }
    let settings = ConnectionSettings::admin(&url).unwrap();
    let mut observer = settings.connect().await.unwrap();
    let sessions: Vec<Session> = diesel::sql_query(
        "SELECT s.ssl, a.query FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid
         WHERE a.application_name = 'hymical-forms' AND a.pid <> pg_backend_pid()",
    )
    .load(&mut observer)
    .await
    .unwrap();
    assert!(sessions.len() >= 2, "{sessions:?}");
    assert!(
        sessions.iter().all(|s| s.ssl),
        "a connection in the clear: {sessions:?}"
    );
    assert!(
        sessions.iter().any(|s| s.query.starts_with("LISTEN")),
        "no LISTEN connection: {sessions:?}"
    );
    let (status, log) = serve.stop();
    assert!(status.success(), "{log}");

    // An authority the server's certificate does not chain to: refused at start, once, and
    // the message says what is wrong.
    let other = authority("Someone else's CA");
    let untrusted = cluster.ca_file(&other, "other.pem");
    let url = cluster.url_with(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", untrusted.display()),
    );
    let db = TestDb::external("tls-untrusted", url);
    let serve = ServeProcess::start(&db, &[]);
    let status = {
        let mut serve = serve;
        let status = serve.child.wait().unwrap();
        (status, serve.log_text())
    };
    assert_eq!(status.0.code(), Some(1), "{}", status.1);
    assert_eq!(status.1.matches("UnknownIssuer").count(), 1, "{}", status.1);
}
