//! The test harness every integration test uses.
//!
//! One PostgreSQL server per test run: a throwaway cluster started from the machine's
//! binaries (the same code as the embedded default, in a temporary directory, stopped
//! and deleted when this process exits however it exits), or the server named by
//! `FORMS_TEST_DATABASE_URL`. A template database is migrated once; each test gets its own
//! database cloned from it, so tests run in parallel and never see each other's rows.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use hymical_forms::testing::app::{App, AppState};
use hymical_forms::testing::clock::{Clock, SystemClock};
use hymical_forms::testing::config::{Config, Secret};
use hymical_forms::testing::db;
use hymical_forms::testing::embedded;
use hymical_forms::testing::model::state::KeyRole;
use hymical_forms::testing::services::{Plan, Services};

struct TestServer {
    /// URL of a maintenance database on the server, for CREATE/DROP DATABASE.
    admin_url: Secret,
    template: String,
    /// Held until the process exits: closing it stops (and deletes) the throwaway cluster.
    _running: Option<embedded::RunningServer>,
}

static SERVER: OnceLock<TestServer> = OnceLock::new();

fn server() -> &'static TestServer {
    SERVER.get_or_init(|| {
        // Its own thread and runtime: the caller may be on any runtime flavour, and the
        // migration harness needs a multi-threaded one.
        std::thread::spawn(start_server)
            .join()
            .expect("the test database server failed to start")
    })
}

fn start_server() -> TestServer {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (admin_url, running) = match std::env::var("FORMS_TEST_DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => (Secret::new(url), None),
        _ => {
            let root = std::env::temp_dir()
                .join(format!("hymical-test-{}", uuid::Uuid::new_v4().simple()));
            let cluster = embedded::Cluster::new(&root).expect("PostgreSQL server binaries");
            cluster
                .hand_root_to_server_user()
                .expect("cluster directory");
            cluster.initialize().expect("initdb");
            let (started, connection) = cluster
                .ensure_running(&embedded::ServerSettings::throwaway())
                .expect("start the test cluster");
            let running = match started {
                embedded::Started::ByUs(running) => Some(running),
                embedded::Started::AlreadyRunning => None,
            };
            (connection.url("postgres"), running)
        }
    };
    let template = format!("hymical_template_{}", uuid::Uuid::new_v4().simple());
    runtime.block_on(async {
        create_database(&admin_url, &template, None).await;
        let url = database_url(&admin_url, &template);
        db::migrations::run_pending(&url)
            .await
            .expect("migrate the template");
    });
    TestServer {
        admin_url,
        template,
        _running: running,
    }
}

/// `admin_url` with its database name replaced.
pub fn database_url(admin_url: &Secret, database: &str) -> Secret {
    let mut url = url::Url::parse(admin_url.expose()).expect("database URL");
    url.set_path(&format!("/{database}"));
    Secret::new(url.to_string())
}

async fn create_database(admin_url: &Secret, name: &str, template: Option<&str>) {
    let mut connection = AsyncPgConnection::establish(admin_url.expose())
        .await
        .expect("connect to the test server");
    let sql = match template {
        Some(template) => format!(
            "CREATE DATABASE {} TEMPLATE {}",
            db::quote_identifier(name),
            db::quote_identifier(template)
        ),
        None => format!("CREATE DATABASE {}", db::quote_identifier(name)),
    };
    diesel::sql_query(sql)
        .execute(&mut connection)
        .await
        .expect("create a test database");
}

/// A database of one test's own. Clones share it (several servers on one database); it is
/// dropped with the last clone.
#[derive(Clone)]
pub struct TestDb(Arc<TestDbInner>);

pub struct TestDbInner {
    pub name: String,
    pub url: Secret,
    /// Made by the harness (and dropped by it when the last clone goes).
    owned: bool,
}

impl std::ops::Deref for TestDb {
    type Target = TestDbInner;
    fn deref(&self) -> &TestDbInner {
        &self.0
    }
}

impl TestDb {
    /// A migrated database cloned from the template.
    pub async fn new() -> TestDb {
        TestDb::create(true).await
    }

    /// An empty database with no migrations applied.
    pub async fn empty() -> TestDb {
        TestDb::create(false).await
    }

    async fn create(migrated: bool) -> TestDb {
        let server = server();
        let name = format!("hymical_test_{}", uuid::Uuid::new_v4().simple());
        let template = migrated.then_some(server.template.as_str());
        create_database(&server.admin_url, &name, template).await;
        let url = database_url(&server.admin_url, &name);
        TestDb(Arc::new(TestDbInner {
            name,
            url,
            owned: true,
        }))
    }

    /// A database the test made elsewhere (its own cluster, say); never dropped here.
    /// (The fault suite's outage test uses it.)
    #[allow(dead_code)]
    pub fn external(name: &str, url: Secret) -> TestDb {
        TestDb(Arc::new(TestDbInner {
            name: name.to_string(),
            url,
            owned: false,
        }))
    }

    pub async fn connect(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(self.url.expose())
            .await
            .expect("connect to the test database")
    }

    /// The address of the database server.
    pub fn server_addr(&self) -> SocketAddr {
        let url = url::Url::parse(self.url.expose()).expect("database URL");
        let port = url.port().expect("port");
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// This database's URL with the server reached at `addr` instead.
    pub fn url_through(&self, addr: SocketAddr) -> Secret {
        let mut url = url::Url::parse(self.url.expose()).expect("database URL");
        url.set_port(Some(addr.port())).expect("port");
        Secret::new(url.to_string())
    }

    /// A connection that names itself as the service's connections do.
    pub async fn connect_as_service(&self) -> AsyncPgConnection {
        let mut connection = self.connect().await;
        diesel::sql_query(format!("SET application_name = '{}'", db::APPLICATION_NAME))
            .execute(&mut connection)
            .await
            .expect("set application_name");
        connection
    }

    /// Drops the database now (for tests that need it gone, such as readiness failures).
    pub async fn drop_now(&self) {
        let mut connection = AsyncPgConnection::establish(server().admin_url.expose())
            .await
            .expect("connect to the test server");
        diesel::sql_query(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            db::quote_identifier(&self.name)
        ))
        .execute(&mut connection)
        .await
        .expect("drop the test database");
    }
}

impl Drop for TestDbInner {
    fn drop(&mut self) {
        // Dropped on a throwaway cluster too: it is deleted whole at exit, but a run's few
        // hundred databases left standing until then take gigabytes of a CI machine's disk.
        if !self.owned {
            return;
        }
        let admin_url = server().admin_url.clone();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let mut connection = AsyncPgConnection::establish(admin_url.expose())
                    .await
                    .ok()?;
                diesel::sql_query(format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    db::quote_identifier(&name)
                ))
                .execute(&mut connection)
                .await
                .ok()
            })
        })
        .join();
    }
}

/// The connection settings and a four-connection pool on `db`, as a serving process
/// opens them (optionally counting statements).
pub async fn pool(
    db: &TestDb,
    counter: Option<db::StatementCounter>,
) -> (db::ConnectionSettings, db::Db) {
    pool_on(&db.url, &config(&[]), counter).await
}

/// [`pool`] on `url`, with the database settings of `config`.
pub async fn pool_on(
    url: &Secret,
    config: &Config,
    counter: Option<db::StatementCounter>,
) -> (db::ConnectionSettings, db::Db) {
    let settings = db::ConnectionSettings::new(url, &config.database).expect("settings");
    let pool =
        db::Db::connect_counted(settings.clone(), 4, config.database.call_timeout(), counter)
            .await
            .expect("test pool");
    (settings, pool)
}

/// Claims as `deliveries::claim` does, at a pinned time and with no endpoint cap to speak
/// of (the tests of fairness set their own).
pub async fn claim_at(
    conn: &mut AsyncPgConnection,
    now: chrono::DateTime<chrono::Utc>,
    lease: std::time::Duration,
    limit: u32,
) -> Result<Vec<db::models::ClaimedDelivery>, db::DbError> {
    db::queue::claim(
        conn,
        db::queue::ClaimRequest {
            now: Some(now),
            lease,
            limit,
            destination_concurrency: 1_000_000,
        },
    )
    .await
}

/// A configuration from the given variables (nothing read from the environment).
pub fn config(vars: &[(&str, &str)]) -> Config {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
        .expect("valid test configuration")
}

/// The service's HTTP surface on a loopback port, inside this test's runtime.
pub struct TestApp {
    pub app: AppState,
    pub addr: SocketAddr,
    pub db: TestDb,
    pub http: reqwest::Client,
    /// The HTTP server, listener, event reader and revocation check; they stop with the
    /// app.
    _services: Services,
    stop: tokio_util::sync::CancellationToken,
}

impl TestApp {
    pub async fn start() -> TestApp {
        TestApp::start_with(&[], Arc::new(SystemClock)).await
    }

    /// An app on the system clock that never answers 429: for tests that post more than
    /// the default limits allow.
    pub async fn start_without_rate_limit() -> TestApp {
        TestApp::start_with(
            &[("FORMS_RATE_LIMIT_ENABLED", "false")],
            Arc::new(SystemClock),
        )
        .await
    }

    /// [`TestApp::start_without_rate_limit`] with an admin key and the endpoint
    /// `contact` ([`TestApp::create_contact_endpoint`]); the key.
    pub async fn with_contact_endpoint() -> (TestApp, String) {
        let app = TestApp::start_without_rate_limit().await;
        let (_, key) = app.create_key("test").await;
        app.create_contact_endpoint(&key).await;
        (app, key)
    }

    pub async fn start_with(vars: &[(&str, &str)], clock: Arc<dyn Clock>) -> TestApp {
        let db = TestDb::new().await;
        TestApp::start_on(db, vars, clock).await
    }

    pub async fn start_on(db: TestDb, vars: &[(&str, &str)], clock: Arc<dyn Clock>) -> TestApp {
        TestApp::start_counted(db, vars, clock, None).await
    }

    /// An app whose pool counts every statement into `counter`.
    pub async fn start_counted(
        db: TestDb,
        vars: &[(&str, &str)],
        clock: Arc<dyn Clock>,
        counter: Option<db::StatementCounter>,
    ) -> TestApp {
        let url = db.url.clone();
        TestApp::start_on_url(db, &url, vars, clock, counter).await
    }

    /// An app on `db` with `vars` whose pool logs every statement it prepares; answers the
    /// log too.
    pub async fn start_logged(
        db: TestDb,
        vars: &[(&str, &str)],
    ) -> (TestApp, db::StatementCounter) {
        let log = Arc::new(db::StatementLog::default());
        let app = TestApp::start_counted(db, vars, Arc::new(SystemClock), Some(log.clone())).await;
        (app, log)
    }

    /// An app on `db` that reaches the database through `url` (a proxy, say).
    pub async fn start_on_url(
        db: TestDb,
        url: &Secret,
        vars: &[(&str, &str)],
        clock: Arc<dyn Clock>,
        counter: Option<db::StatementCounter>,
    ) -> TestApp {
        let config = config(vars);
        let (settings, pool) = pool_on(url, &config, counter).await;
        // With FORMS_DATABASE_READ_URL, the read replica as a serving process opens it.
        let replica = config.database.read.as_ref().map(|read| {
            hymical_forms::testing::replica::Replica::open(read, &config.database)
                .expect("read replica settings")
        });
        let app = App::with_replica(config, settings, pool, replica, clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let services = Services::start(&app, api_plan(listener, &app));
        let stop = services.stop_token();
        TestApp {
            app,
            addr,
            db,
            // Redirects are answers under test, never followed.
            // No pooled connections: a server that answers 413 before reading a body
            // closes the connection, and a pooled client could race to reuse it.
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .pool_max_idle_per_host(0)
                .build()
                .expect("http client"),
            _services: services,
            stop,
        }
    }

    /// Stops the listener, event reader and revocation check as a stopping server does.
    pub fn stop_live_services(&self) {
        self.stop.cancel();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Creates an admin management key directly in the database and returns its id and
    /// the key.
    pub async fn create_key(&self, name: &str) -> (String, String) {
        self.create_key_with_role(name, KeyRole::Admin).await
    }

    /// Creates the endpoint `contact` ("Contact"), without destinations, through GraphQL.
    pub async fn create_contact_endpoint(&self, key: &str) {
        data(
            self.gql(
                key,
                "mutation { createEndpoint(input: { id: \"contact\", name: \"Contact\" }) { endpoint { id } } }",
                serde_json::json!({}),
            )
            .await,
        );
    }

    /// [`TestApp::create_key`] with a role.
    pub async fn create_key_with_role(&self, name: &str, role: KeyRole) -> (String, String) {
        let new = hymical_forms::testing::auth::generate(name, role, self.app.clock.now());
        let mut connection = self.db.connect().await;
        db::keys::insert(&mut connection, &new.row)
            .await
            .expect("insert key");
        (new.row.id.to_string(), new.key.expose().to_string())
    }

    /// POSTs a GraphQL operation with variables, authenticated with `key`.
    pub async fn gql(
        &self,
        key: &str,
        query: &str,
        variables: serde_json::Value,
    ) -> serde_json::Value {
        let response = self
            .http
            .post(self.url("/graphql"))
            .header("authorization", format!("Bearer {key}"))
            .json(&serde_json::json!({ "query": query, "variables": variables }))
            .send()
            .await
            .expect("graphql request");
        assert_eq!(response.status(), 200);
        response.json().await.expect("json body")
    }

    /// POSTs a GraphQL query with the given `Authorization` header value.
    pub async fn graphql(
        &self,
        authorization: Option<&str>,
        query: &str,
    ) -> (u16, serde_json::Value) {
        let mut request = self
            .http
            .post(self.url("/graphql"))
            .json(&serde_json::json!({ "query": query }));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let response = request.send().await.expect("graphql request");
        let status = response.status().as_u16();
        (status, response.json().await.expect("json body"))
    }
}

/// The repository's root (this crate is tests/support).
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `hymical-forms` binary cargo built for the running test binary: beside its
/// `deps/` folder (target/<profile>/deps/<test>-<hash> → target/<profile>/hymical-forms).
pub fn forms_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let path = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the target directory")
        .join("hymical-forms");
    assert!(
        path.is_file(),
        "{} not built (cargo test builds it)",
        path.display()
    );
    path
}

/// The `hymical-forms` binary with a clean environment: no `FORMS_*` variable leaks in
/// from the developer's shell, and no `.env` is found (the working directory is `dir`).
pub fn forms_command(dir: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(forms_binary());
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .current_dir(dir);
    command
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Polls `url` until it answers `expected`, for up to 60 seconds.
pub async fn wait_for_status(url: &str, expected: u16) {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Ok(response) = client.get(url).send().await {
            if response.status().as_u16() == expected {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{url} never answered {expected}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The services of a process that serves the API on `listener` and runs nothing else (no
/// workers, no upkeep): the event reader and the LISTEN connection come with it.
pub fn api_plan(listener: tokio::net::TcpListener, app: &hymical_forms::testing::app::App) -> Plan {
    Plan {
        http: Some((
            listener,
            hymical_forms::testing::http::server::Limits::from_config(&app.config),
        )),
        metrics: None,
        workers: None,
        sweeper: false,
        retention: false,
        pruning: false,
    }
}

/// POSTs `body` to `url` as an HTML form does (`application/x-www-form-urlencoded`).
pub async fn post_urlencoded(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    body: impl Into<reqwest::Body>,
) -> reqwest::Result<reqwest::Response> {
    client
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
}

/// An endpoint row with defaults a test can adjust before inserting.
pub fn endpoint(id: &str) -> db::models::EndpointRow {
    db::models::EndpointRow::new(
        hymical_forms::testing::model::ids::EndpointId::parse(id).expect("endpoint id"),
        format!("Endpoint {id}"),
        chrono::Utc::now(),
    )
}

/// A signing secret in the documented format.
pub fn webhook_secret() -> String {
    format!(
        "whsec_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl TestDb {
    /// `hymical-forms` with `args` against this database, in an empty directory, run to
    /// its end.
    pub fn run_cli(&self, args: &[&str]) -> std::process::Output {
        let dir = tempfile::tempdir().expect("a directory");
        forms_command(dir.path())
            .env("FORMS_DATABASE_URL", self.url.expose())
            .args(args)
            .output()
            .expect("run hymical-forms")
    }

    /// [`TestDb::run_cli`] that must succeed: its standard output.
    pub fn cli_stdout(&self, args: &[&str]) -> String {
        let output = self.run_cli(args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Inserts an admin key of every project named `name`; returns the key.
    pub async fn insert_admin_key(&self, name: &str) -> String {
        let new = hymical_forms::testing::auth::generate(name, KeyRole::Admin, chrono::Utc::now());
        let mut conn = self.connect().await;
        db::keys::insert(&mut conn, &new.row).await.expect("key");
        new.key.expose().to_string()
    }

    /// Inserts endpoint `id` delivering to one webhook at `url`, with a fresh secret.
    pub async fn insert_webhook_endpoint(&self, id: &str, url: impl Into<String>) {
        let mut conn = self.connect().await;
        let row = endpoint(id);
        db::endpoints::insert(&mut conn, &row, webhook(&row, url, webhook_secret()))
            .await
            .expect("endpoint");
    }
}

/// A webhook destination of `endpoint` to `url` signed with `secret`: its first, as
/// `webhookUrl` knows it.
pub fn webhook(
    endpoint: &db::models::EndpointRow,
    url: impl Into<String>,
    secret: impl Into<String>,
) -> Option<db::models::DestinationRow> {
    Some(db::models::DestinationRow::webhook(
        endpoint.id.clone(),
        1,
        url.into(),
        secret.into(),
        chrono::Utc::now(),
    ))
}

impl TestApp {
    /// Inserts an endpoint without destinations.
    pub async fn insert_endpoint(&self, endpoint: &db::models::EndpointRow) {
        self.insert_endpoint_with(endpoint, None).await;
    }

    /// Inserts an endpoint with a webhook destination (see [`webhook`]), or none.
    pub async fn insert_endpoint_with(
        &self,
        endpoint: &db::models::EndpointRow,
        webhook: Option<db::models::DestinationRow>,
    ) {
        let mut conn = self.db.connect().await;
        db::endpoints::insert(&mut conn, endpoint, webhook)
            .await
            .expect("insert endpoint");
    }

    /// Rows in `submissions` and `webhook_deliveries`.
    pub async fn stored_counts(&self) -> (i64, i64) {
        #[derive(diesel::QueryableByName)]
        struct Counts {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            submissions: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            deliveries: i64,
        }
        let mut conn = self.db.connect().await;
        let counts: Counts = diesel::sql_query(
            "SELECT (SELECT count(*) FROM submissions) AS submissions, (SELECT count(*) FROM webhook_deliveries) AS deliveries",
        )
        .get_result(&mut conn)
        .await
        .expect("count rows");
        (counts.submissions, counts.deliveries)
    }

    /// POSTs `body` to `/f/{endpoint}` with the given content type and extra headers.
    pub async fn post_form(
        &self,
        endpoint: &str,
        content_type: Option<&str>,
        body: impl Into<reqwest::Body>,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = self
            .http
            .post(self.url(&format!("/f/{endpoint}")))
            .body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("post form")
    }
}

impl TestApp {
    /// A worker on this app's pool and clock, resolving names with `resolver` (the system
    /// resolver when `None`).
    pub fn worker(
        &self,
        resolver: Option<hymical_forms::testing::outbound::StaticResolver>,
    ) -> Arc<hymical_forms::testing::delivery::Worker> {
        use hymical_forms::testing::outbound::{NameResolver, SystemResolver};
        let resolver: Arc<dyn NameResolver> = match resolver {
            Some(resolver) => Arc::new(resolver),
            None => Arc::new(SystemResolver),
        };
        let app = &self.app;
        hymical_forms::testing::delivery::Worker::new(
            app.db.clone(),
            app.clock.clone(),
            app.files.clone(),
            &app.config,
            self.senders(resolver),
            Arc::new(tokio::sync::Notify::new()),
        )
    }

    /// An operator alert sender with the app's configuration, driven by the test
    /// (`send_due`), as every worker process runs one.
    pub fn alert_sender(&self) -> hymical_forms::testing::delivery::alerts::AlertSender {
        let senders = self.senders(Arc::new(hymical_forms::testing::outbound::SystemResolver));
        hymical_forms::testing::delivery::alerts::AlertSender::new(
            self.app.db.clone(),
            self.app.config.alerts.clone(),
            senders.mail,
            senders.webhook,
            self.app.clock.clone(),
        )
    }

    /// The webhook client (through `resolver`) and, with a mail server configured, the
    /// mailer, as a worker process builds them.
    fn senders(
        &self,
        resolver: Arc<dyn hymical_forms::testing::outbound::NameResolver>,
    ) -> hymical_forms::testing::delivery::Senders {
        hymical_forms::testing::delivery::Senders {
            webhook: hymical_forms::testing::delivery::client::WebhookClient::new(
                &self.app.config.webhook,
                resolver,
            )
            .expect("webhook client"),
            mail: self.app.config.smtp.as_ref().map(|smtp| {
                hymical_forms::testing::delivery::email::Mailer::new(smtp).expect("mailer")
            }),
        }
    }

    /// An active endpoint with a webhook to `url`; returns its secret.
    pub async fn webhook_endpoint(&self, id: &str, url: &str) -> String {
        let new = endpoint(id);
        let secret = webhook_secret();
        self.insert_endpoint_with(&new, webhook(&new, url, secret.clone()))
            .await;
        secret
    }

    /// Posts one urlencoded form and returns the submission id.
    pub async fn submit(&self, endpoint: &str, body: &str) -> String {
        let response = self
            .post_form(
                endpoint,
                Some("application/x-www-form-urlencoded"),
                body.to_string(),
                &[],
            )
            .await;
        assert_eq!(response.status(), 202);
        let body: serde_json::Value = response.json().await.expect("receipt");
        body["submission_id"]
            .as_str()
            .expect("submission id")
            .to_string()
    }
}

/// One delivery row, as tests inspect it.
#[derive(diesel::QueryableByName, Debug, Clone)]
pub struct DeliveryRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub state: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempts: i32,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub cycle_attempts: i32,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub next_attempt_at: chrono::DateTime<chrono::Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub claim_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub claim_token: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub submission_id: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub destination_id: Option<String>,
}

impl DeliveryRow {
    /// Where the delivery stands: its state, attempts and attempts in this cycle.
    pub fn progress(&self) -> (&str, i32, i32) {
        (self.state.as_str(), self.attempts, self.cycle_attempts)
    }
}

/// One attempt row.
#[derive(diesel::QueryableByName, Debug, Clone)]
pub struct AttemptRow {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempt_number: i32,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub outcome: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Integer>)]
    pub response_status: Option<i32>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub error: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub late: bool,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub attempted_at: chrono::DateTime<chrono::Utc>,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub duration_ms: i32,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub row_json: String,
}

impl TestDb {
    /// The newest event id: subscribing after it sees every later change, however long
    /// the subscription takes to start.
    pub async fn newest_event_id(&self) -> i64 {
        use diesel::QueryDsl;
        use hymical_forms::testing::db::schema::delivery_events::dsl::*;
        let mut conn = self.connect().await;
        delivery_events
            .select(diesel::dsl::max(id))
            .first::<Option<i64>>(&mut conn)
            .await
            .expect("newest event id")
            .unwrap_or(0)
    }

    /// The one bigint a `SELECT count(*) AS n …` (or any `… AS n`) answers.
    pub async fn count(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = self.connect().await;
        diesel::sql_query(sql)
            .get_result::<Count>(&mut conn)
            .await
            .expect("count")
            .n
    }

    /// Waits (at most 30 s) until `n` backends of this database wait for a lock (tests on
    /// other databases of the shared server wait for theirs).
    pub async fn until_waiting_for_locks(&self, n: i64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self
            .count(
                "SELECT count(*) AS n FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .await
            < n
        {
            assert!(
                std::time::Instant::now() < deadline,
                "fewer than {n} backends ever waited for a lock"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub async fn deliveries(&self) -> Vec<DeliveryRow> {
        let mut conn = self.connect().await;
        diesel::sql_query(
            "SELECT id, state, attempts, cycle_attempts, next_attempt_at, claim_expires_at, claim_token, completed_at, submission_id,
                    destination_id
             FROM webhook_deliveries ORDER BY created_at, id",
        )
        .load(&mut conn)
        .await
        .expect("deliveries")
    }

    /// The ids of every delivery, oldest first.
    pub async fn delivery_ids(&self) -> Vec<String> {
        self.deliveries().await.into_iter().map(|d| d.id).collect()
    }

    pub async fn delivery(&self, id: &str) -> DeliveryRow {
        self.deliveries()
            .await
            .into_iter()
            .find(|d| d.id == id)
            .expect("delivery row")
    }

    pub async fn attempts(&self, delivery_id: &str) -> Vec<AttemptRow> {
        let mut conn = self.connect().await;
        diesel::sql_query(
            "SELECT attempt_number, outcome, response_status, error, late, attempted_at, duration_ms, row_to_json(a)::text AS row_json
             FROM delivery_attempts a WHERE delivery_id = $1 ORDER BY attempt_number",
        )
        .bind::<diesel::sql_types::Text, _>(delivery_id)
        .load(&mut conn)
        .await
        .expect("attempts")
    }
}

/// A `hymical-forms serve` process on a test database, its log kept in a file.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub port: u16,
    pub log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl ServeProcess {
    pub fn start(db: &TestDb, vars: &[(&str, &str)]) -> ServeProcess {
        ServeProcess::start_limited(db, vars, None)
    }

    /// [`ServeProcess::start`] with the open-file limit (soft and hard) set to `nofile`.
    pub fn start_limited(db: &TestDb, vars: &[(&str, &str)], nofile: Option<u64>) -> ServeProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let log = dir.path().join("serve.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = forms_command(dir.path());
        command
            .env("FORMS_DATABASE_URL", db.url.expose())
            .env("FORMS_BIND", format!("127.0.0.1:{port}"))
            .env("FORMS_DATABASE_POOL_SIZE", "4")
            .stdout(log_file.try_clone().expect("log handle"))
            .stderr(log_file);
        for (name, value) in vars {
            command.env(name, value);
        }
        if let Some(nofile) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || {
                    nix::sys::resource::setrlimit(
                        nix::sys::resource::Resource::RLIMIT_NOFILE,
                        nofile,
                        nofile,
                    )
                    .map_err(std::io::Error::from)
                });
            }
        }
        let child = command.spawn().expect("start serve");
        ServeProcess {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal)
            .expect("signal");
    }

    /// SIGTERM, then waits for the exit status.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let status = self.child.wait().expect("wait");
        (status, self.log_text())
    }

    /// SIGTERM, then the exit status if the process exits within `limit` (killed if not).
    pub fn stop_within(
        mut self,
        limit: std::time::Duration,
    ) -> (Option<std::process::ExitStatus>, String) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (Some(status), self.log_text());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        (None, self.log_text())
    }

    pub fn kill(mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A process a test did not stop (it failed, or forgot) must not outlive it.
impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl TestDb {
    /// Polls until `done` holds for the deliveries (at most `seconds`).
    pub async fn wait_for_deliveries(
        &self,
        seconds: u64,
        done: impl Fn(&[DeliveryRow]) -> bool,
    ) -> Vec<DeliveryRow> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
        loop {
            let rows = self.deliveries().await;
            if done(&rows) {
                return rows;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "deliveries never reached the expected state: {rows:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// `tests/{name}` with its pinned npm packages installed (`npm ci`, when any of
/// `packages` is missing): the directory, for node to run a script in.
pub fn npm_installed(name: &str, packages: &[&str]) -> std::path::PathBuf {
    let dir = repo_root().join("tests").join(name);
    if packages
        .iter()
        .any(|package| !dir.join("node_modules").join(package).is_dir())
    {
        let install = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("npm is needed for the tests in tests/{name} (Debian: apt-get install nodejs npm): {e}")
            });
        assert!(
            install.status.success(),
            "npm ci in tests/{name} failed: {}",
            String::from_utf8_lossy(&install.stderr)
        );
    }
    dir
}

/// The `data` of a GraphQL answer, failing the test on any error.
pub fn data(answer: serde_json::Value) -> serde_json::Value {
    assert!(answer.get("errors").is_none(), "{answer}");
    answer["data"].clone()
}

/// Asserts that a GraphQL answer is refused as `INVALID_INPUT` naming `field`.
pub fn assert_invalid_input(answer: &serde_json::Value, field: &str) {
    let error = &answer["errors"][0]["extensions"];
    assert_eq!(error["code"], "INVALID_INPUT", "{answer}");
    assert_eq!(error["details"]["field"], field, "{answer}");
}

/// POSTs a GraphQL operation with `variables` to `url` (a server's `/graphql`),
/// authenticated with `key`; answers its [`data`], failing the test on any error.
pub async fn graphql_data(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    query: &str,
    variables: serde_json::Value,
) -> serde_json::Value {
    let answer: serde_json::Value = http
        .post(url)
        .bearer_auth(key)
        .json(&serde_json::json!({ "query": query, "variables": variables }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    data(answer)
}

/// Serves `router` on a free loopback port in the background (for the rest of the test's
/// runtime); answers its address.
pub async fn serve_on_loopback(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

impl TestApp {
    /// POSTs `form` urlencoded to `/f/{endpoint}` with the extra `headers`; answers the
    /// status and the JSON body.
    pub async fn post_urlencoded(
        &self,
        endpoint: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> (u16, serde_json::Value) {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let response = self
            .post_form(
                endpoint,
                Some("application/x-www-form-urlencoded"),
                body,
                headers,
            )
            .await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    /// A form stamp for `endpoint` (`GET /f/{endpoint}/stamp` with the extra `headers`,
    /// as the snippet fetches it when its page loads): the JSON answer.
    pub async fn form_stamp(&self, endpoint: &str, headers: &[(&str, &str)]) -> serde_json::Value {
        let mut request = self.http.get(self.url(&format!("/f/{endpoint}/stamp")));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap().json().await.unwrap()
    }
}

impl TestDb {
    /// The password in this database's URL.
    pub fn password(&self) -> String {
        self.url
            .expose()
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('@'))
            .and_then(|(credentials, _)| credentials.split_once(':'))
            .map(|(_, password)| password.to_string())
            .expect("a password in the test database URL")
    }
}
