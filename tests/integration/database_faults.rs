//! Bounded database calls: a network to PostgreSQL that silently stops delivering, and
//! exports whose clients never read, cannot hold requests or the shared pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::RunQueryDsl;
use hymical_forms::testing::clock::SystemClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::harness::{TestApp, TestDb};
use support::proxy::Proxy;

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_network_to_the_database_answers_every_request_within_its_deadline() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(db.server_addr()).await;
    let url = db.url_through(proxy.addr);
    let vars = [
        ("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", "1"),
        ("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "1"),
    ];
    let app = TestApp::start_on_url(db, &url, &vars, Arc::new(SystemClock), None).await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;
    let (_, key) = app.create_key("ops").await;
    let post = || async {
        let started = Instant::now();
        let (status, body) = app.post_urlencoded("contact", &[("a", "1")], &[]).await;
        (status, body, started.elapsed())
    };
    assert_eq!(post().await.0, 202);

    proxy.set_blackhole(true);
    // Statement timeout 1 s: the call deadline is 3 s. Each request answers by then,
    // whether its connection was open already or has to be opened.
    let deadline = Duration::from_secs(6);
    for _ in 0..2 {
        let (status, body, took) = post().await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "storage_unavailable");
        assert!(took < deadline, "intake took {took:?}");
        let started = Instant::now();
        let ready = app.http.get(app.url("/ready")).send().await.unwrap();
        assert_eq!(ready.status(), 503);
        assert!(started.elapsed() < deadline);
        let started = Instant::now();
        let (status, _) = app
            .graphql(Some(&format!("Bearer {key}")), "{ version }")
            .await;
        assert_eq!(status, 503);
        assert!(started.elapsed() < deadline);
    }
    // Once the network delivers again, so does the service, without a restart.
    proxy.set_blackhole(false);
    let recovered = Instant::now();
    loop {
        let (status, _, _) = post().await;
        if status == 202 {
            break;
        }
        assert!(
            recovered.elapsed() < Duration::from_secs(20),
            "no recovery after the network came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing was stored while the database could not be reached.
    let (submissions, _) = app.stored_counts().await;
    assert_eq!(submissions, 2);
}

/// Opens an export on a socket with a tiny receive buffer that reads only the status
/// line, then stops reading: a client that never takes the body.
async fn stalled_export(app: &TestApp, key: &str) -> (tokio::net::TcpStream, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(app.addr).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /submissions/export?format=json HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).await.unwrap();
    (stream, String::from_utf8_lossy(&status).into_owned())
}

async fn exports_in_transaction(app: &TestApp) -> i64 {
    app.db
        .count(
            "SELECT count(*) AS n FROM pg_stat_activity
             WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
        )
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn exports_whose_clients_never_read_cannot_take_the_pool() {
    let vars = [
        ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ("FORMS_EXPORT_MAX_CONCURRENT", "2"),
        ("FORMS_HTTP_SEND_TIMEOUT_SECONDS", "1"),
        ("FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "5"),
        ("FORMS_EXPORT_MAX_SUBMISSIONS", "100000"),
    ];
    let app = TestApp::start_with(&vars, Arc::new(SystemClock)).await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;
    let (_, key) = app.create_key("ops").await;
    // About 12 MB of submissions in 40 pages: far more than the response channel and the
    // socket buffers hold, so a client that stops reading stops the export.
    let mut conn = app.db.connect().await;
    diesel::sql_query(
        "INSERT INTO submissions (id, endpoint_id, received_at, fields)
         SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'contact', now() - n * interval '1 ms',
                json_build_object('note', json_build_array(repeat('x', 500)))
         FROM generate_series(1, 20000) AS n",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    // Four exports whose clients stop reading: as many as the test pool has connections.
    let mut held = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (stream, status) = stalled_export(&app, &key).await;
        statuses.push(status);
        held.push(stream);
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [
            "HTTP/1.1 200",
            "HTTP/1.1 200",
            "HTTP/1.1 429",
            "HTTP/1.1 429"
        ]
    );
    // Intake is untouched: the exports have connections of their own.
    for _ in 0..10 {
        let started = Instant::now();
        let (status, body) = app.post_urlencoded("contact", &[("a", "1")], &[]).await;
        assert_eq!(status, 202, "{body}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    // After the send timeout the stalled exports end: their transactions close.
    let started = Instant::now();
    while exports_in_transaction(&app).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "stalled exports kept their transactions"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(held);
    // And an export that is read works again.
    let response = app
        .http
        .get(app.url("/submissions/export?format=json"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["submissions"].as_array().unwrap().len(), 20_010);
}

/// A listener on loopback that accepts connections and never says a word: a host that is
/// up but hung, as a crashed primary's address can be during a failover. Counts the
/// connections it accepted.
async fn silent_host() -> (
    std::net::SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(socket);
        }
    });
    (addr, accepted, task)
}

/// `db`'s URL with the host list `hosts` (each `host:port`) and the read-write check.
fn multi_host_url(db: &TestDb, hosts: &[String]) -> hymical_forms::testing::config::Secret {
    let url = url::Url::parse(db.url.expose()).expect("database URL");
    hymical_forms::testing::config::Secret::new(format!(
        "postgres://{}:{}@{}{}?target_session_attrs=read-write&sslmode=disable",
        url.username(),
        url.password().unwrap_or_default(),
        hosts.join(","),
        url.path()
    ))
}

/// Connection settings for `url` with the given connect deadline (the pool's other
/// timeouts as the service's defaults would leave them for this test).
fn settings_with_deadline(
    url: &hymical_forms::testing::config::Secret,
    connect_timeout: Duration,
) -> hymical_forms::testing::db::ConnectionSettings {
    hymical_forms::testing::db::ConnectionSettings::with_timeouts(
        url,
        Duration::from_secs(5),
        Duration::from_secs(60),
        connect_timeout,
    )
    .expect("settings")
}

/// The port of the server `connection` reached.
async fn server_port(connection: &mut diesel_async::AsyncPgConnection) -> u16 {
    let port = diesel::sql_query("SELECT inet_server_port() AS port")
        .get_result::<Port>(connection)
        .await
        .expect("query")
        .port;
    u16::try_from(port).expect("a port")
}

/// A first host of a multi-host URL that accepts and never answers (a primary cut off in
/// a failover) does not cost each connection a connect deadline: the next host is tried
/// beside it half a second later and used, and from then on tried first.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_first_host_does_not_cost_a_connect_deadline_and_the_next_host_is_used() {
    let db = TestDb::new().await;
    let (silent, accepted, _task) = silent_host().await;
    let url = multi_host_url(&db, &[silent.to_string(), db.server_addr().to_string()]);
    // Long, so that a connection which waited for it cannot pass for one that did not.
    let connect_timeout = Duration::from_secs(10);
    let settings = settings_with_deadline(&url, connect_timeout);
    let started = Instant::now();
    let mut connection = settings.connect().await.expect("the second host");
    let took = started.elapsed();
    // A correctness bound, not a benchmark: the first host was asked and did not answer,
    // and the second was not made to wait for its deadline.
    assert_eq!(
        std::sync::atomic::AtomicUsize::load(&accepted, std::sync::atomic::Ordering::SeqCst),
        1,
        "the first host was not tried"
    );
    assert!(took < connect_timeout, "took {took:?}");
    assert_eq!(server_port(&mut connection).await, db.server_addr().port());
    // The host that opened is asked first next time: the hung one is not asked again.
    let mut again = settings.connect().await.expect("the second host again");
    assert_eq!(server_port(&mut again).await, db.server_addr().port());
    assert_eq!(
        std::sync::atomic::AtomicUsize::load(&accepted, std::sync::atomic::Ordering::SeqCst),
        1
    );
    let connect_timeout = Duration::from_secs(1);

    // The same two hosts in libpq's keyword/value form.
    let parsed = url::Url::parse(db.url.expose()).expect("database URL");
    let password = percent_encoding::percent_decode_str(parsed.password().unwrap_or_default())
        .decode_utf8()
        .expect("password")
        .replace('\\', "\\\\")
        .replace('\'', "\\'");
    let keywords = hymical_forms::testing::config::Secret::new(format!(
        "host={},{} port={},{} user={} password='{password}' dbname={} \
         target_session_attrs=read-write sslmode=disable",
        silent.ip(),
        db.server_addr().ip(),
        silent.port(),
        db.server_addr().port(),
        parsed.username(),
        parsed.path().trim_start_matches('/'),
    ));
    let mut connection = settings_with_deadline(&keywords, connect_timeout)
        .connect()
        .await
        .expect("the second host");
    assert_eq!(server_port(&mut connection).await, db.server_addr().port());

    // The whole service starts and serves on such a URL.
    let vars = [("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "1")];
    let app = TestApp::start_on_url(db, &url, &vars, Arc::new(SystemClock), None).await;
    app.insert_endpoint(&support::harness::endpoint("contact"))
        .await;
    let response = app
        .post_form(
            "contact",
            Some("application/x-www-form-urlencoded"),
            "a=1",
            &[],
        )
        .await;
    assert_eq!(response.status(), 202);

    // When no host can be used the error names each host and why, never the password.
    let password = url::Url::parse(app.db.url.expose())
        .unwrap()
        .password()
        .unwrap_or_default()
        .to_string();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let nowhere = multi_host_url(&app.db, &[silent.to_string(), closed.to_string()]);
    let error = settings_with_deadline(&nowhere, connect_timeout)
        .connect()
        .await
        .err()
        .expect("no host")
        .to_string();
    assert!(error.contains(&silent.to_string()), "{error}");
    assert!(error.contains(&closed.to_string()), "{error}");
    assert!(
        !password.is_empty() && !error.contains(&password),
        "{error}"
    );
}

/// A standby promoted while the old primary's host stays silent is found by the opening
/// under way, not by the next one after the silent host's whole connect deadline: while a
/// host has not answered, the one that said "read-only" is asked again.
#[tokio::test(flavor = "multi_thread")]
async fn a_standby_that_starts_taking_writes_is_found_while_another_host_is_silent() {
    let db = TestDb::new().await;
    let (silent, _accepted, _task) = silent_host().await;
    let database = hymical_forms::testing::db::quote_identifier(&db.name);
    let mut admin = db.connect().await;
    // New sessions of this database refuse the read-write check, as a standby's do.
    diesel::sql_query(format!(
        "ALTER DATABASE {database} SET default_transaction_read_only = on"
    ))
    .execute(&mut admin)
    .await
    .expect("read-only");
    let url = multi_host_url(&db, &[silent.to_string(), db.server_addr().to_string()]);
    let connect_timeout = Duration::from_secs(10);
    let settings = settings_with_deadline(&url, connect_timeout);
    let started = Instant::now();
    let opening = tokio::spawn(async move { settings.connect().await.map(|_| ()) });
    // Promoted a second and a half into the opening, which has asked both hosts by then.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    diesel::sql_query(format!(
        "ALTER DATABASE {database} RESET default_transaction_read_only"
    ))
    .execute(&mut admin)
    .await
    .expect("read-write");
    opening
        .await
        .expect("task")
        .expect("the promoted host, within the same opening");
    // A correctness bound, not a benchmark: well before the silent host's deadline.
    let took = started.elapsed();
    assert!(took < connect_timeout, "took {took:?}");
}

#[derive(diesel::QueryableByName)]
struct Port {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    port: i32,
}

/// The backend process id of the connection the pool hands out for one call.
async fn backend_pid(
    pool: &hymical_forms::testing::db::Db,
) -> Result<i32, hymical_forms::testing::db::DbError> {
    pool.run(async |conn| {
        let row: Port = diesel::sql_query("SELECT pg_backend_pid() AS port")
            .get_result(conn)
            .await?;
        Ok(row.port)
    })
    .await
}

#[derive(diesel::QueryableByName)]
struct Setting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

/// A server that no longer takes writes (a demoted primary, which answers `25006`) costs
/// the pool that connection: the next call gets a fresh one, which finds the primary,
/// rather than failing on the same connection again.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_that_refuses_writes_is_dropped_from_the_pool() {
    let db = TestDb::new().await;
    let (_settings, pool) = support::harness::pool(&db, None).await;
    let pid_of = || async { backend_pid(&pool).await.expect("pid") };
    // One connection at a time: each call below gets the pool's idle one when it has one.
    let first = pid_of().await;
    assert_eq!(pid_of().await, first, "the idle connection is reused");
    let refused = pool
        .run(async |conn| {
            // As a standby, or a primary demoted under it, would answer.
            diesel::sql_query("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
                .execute(conn)
                .await?;
            diesel::sql_query("CREATE TEMPORARY TABLE written (x int)")
                .execute(conn)
                .await?;
            Ok(())
        })
        .await
        .expect_err("read-only");
    assert!(refused.ends_connection(), "{refused}");
    let after = pid_of().await;
    assert_ne!(
        after, first,
        "the read-only connection went back to the pool"
    );
    let read_only = pool
        .run(async |conn| {
            let row: Setting =
                diesel::sql_query("SELECT current_setting('transaction_read_only') AS value")
                    .get_result(conn)
                    .await?;
            Ok(row.value)
        })
        .await
        .expect("setting");
    assert_eq!(read_only, "off");
}

/// An idle pooled connection whose server ended it (as a primary does to its sessions when
/// it dies or is demoted in a failover) is passed over at checkout: the next call gets a
/// fresh connection and succeeds, rather than failing on the dead one.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_connection_ended_by_the_server_is_replaced_at_checkout() {
    let db = TestDb::new().await;
    let (_settings, pool) = support::harness::pool(&db, None).await;
    let first = backend_pid(&pool).await.expect("pid");
    let mut admin = db.connect().await;
    diesel::sql_query(format!("SELECT pg_terminate_backend({first})"))
        .execute(&mut admin)
        .await
        .expect("terminate");
    // Until the backend has ended (bounded); the pool's connection then reads the server's
    // goodbye on its own, without being asked.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let gone = db
            .count(&format!(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE pid = {first}"
            ))
            .await;
        if gone == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the backend did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = backend_pid(&pool)
        .await
        .expect("a call after the server ended the idle connection");
    assert_ne!(second, first);
}
