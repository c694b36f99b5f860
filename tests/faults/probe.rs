//! What a test reads off a running server process: memory, descriptors, and the
//! database's view of its connections and queue.

use diesel_async::RunQueryDsl;

use support::harness::TestDb;

/// Resident memory of a process, in kilobytes.
pub fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Open file descriptors of a process, and how many of them are sockets.
pub fn descriptors(pid: u32) -> (usize, usize) {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let mut all = 0;
    let mut sockets = 0;
    for entry in entries.flatten() {
        all += 1;
        if std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        {
            sockets += 1;
        }
    }
    (all, sockets)
}

#[derive(diesel::QueryableByName, Debug, Clone, Copy, Default)]
pub struct QueueView {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub pending: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub processing: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub delivered: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub failed: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub service_connections: i64,
}

/// The queue by state, and the service's connections to this database.
pub async fn queue(db: &TestDb) -> QueueView {
    let mut conn = db.connect().await;
    diesel::sql_query(
        "SELECT count(*) FILTER (WHERE state = 'pending') AS pending,
                count(*) FILTER (WHERE state = 'processing') AS processing,
                count(*) FILTER (WHERE state = 'delivered') AS delivered,
                count(*) FILTER (WHERE state = 'failed') AS failed,
                (SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = 'hymical-forms')
                    AS service_connections
         FROM webhook_deliveries",
    )
    .get_result(&mut conn)
    .await
    .expect("queue view")
}

/// Waits (at most `within`) until no delivery is pending or in progress; answers the
/// queue then.
pub async fn settled(db: &TestDb, within: std::time::Duration) -> QueueView {
    let deadline = std::time::Instant::now() + within;
    loop {
        let view = queue(db).await;
        if view.pending == 0 && view.processing == 0 {
            return view;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not settled: {view:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Deliveries whose attempt numbers are not exactly 1..attempts, with what they hold.
pub async fn numbering_gaps(db: &TestDb) -> Vec<String> {
    #[derive(diesel::QueryableByName)]
    struct Gap {
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
    }
    let mut conn = db.connect().await;
    let gaps: Vec<Gap> = diesel::sql_query(
        "SELECT d.id FROM webhook_deliveries d
         LEFT JOIN delivery_attempts a ON a.delivery_id = d.id
         GROUP BY d.id, d.attempts
         HAVING d.attempts <> count(a.id)
             OR coalesce(array_agg(a.attempt_number ORDER BY a.attempt_number)
                         FILTER (WHERE a.id IS NOT NULL), '{}')
                <> coalesce((SELECT array_agg(n ORDER BY n) FROM generate_series(1, d.attempts) n),
                            '{}')",
    )
    .load(&mut conn)
    .await
    .expect("gaps");
    gaps.into_iter().map(|gap| gap.id).collect()
}

/// Which of `ids` are stored, with their delivery state (`None`: stored, no delivery).
pub async fn stored(db: &TestDb, ids: &[String]) -> Vec<(String, Option<String>)> {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        state: Option<String>,
    }
    let mut conn = db.connect().await;
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT s.id, d.state FROM submissions s
         LEFT JOIN webhook_deliveries d ON d.submission_id = s.id
         WHERE s.id = ANY($1)",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Text>, _>(ids)
    .load(&mut conn)
    .await
    .expect("stored");
    rows.into_iter().map(|row| (row.id, row.state)).collect()
}

/// For each of `ids` that is stored, each destination of its endpoint: how many
/// deliveries the submission has for it, and how many of those are delivered.
pub async fn per_destination(db: &TestDb, ids: &[String]) -> Vec<DestinationDeliveries> {
    let mut conn = db.connect().await;
    diesel::sql_query(
        "SELECT s.id AS submission_id, dest.kind,
                count(d.id) AS deliveries,
                count(d.id) FILTER (WHERE d.state = 'delivered') AS delivered
         FROM submissions s
         JOIN destinations dest ON dest.endpoint_id = s.endpoint_id AND dest.removed_at IS NULL
         LEFT JOIN webhook_deliveries d
                ON d.submission_id = s.id AND d.destination_id = dest.id
         WHERE s.id = ANY($1)
         GROUP BY s.id, dest.id, dest.kind",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Text>, _>(ids)
    .load(&mut conn)
    .await
    .expect("deliveries per destination")
}

#[derive(diesel::QueryableByName, Debug, Clone)]
pub struct DestinationDeliveries {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub submission_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub kind: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub deliveries: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub delivered: i64,
}

/// Deliveries of `ids` in all (whatever their destination, or none).
pub async fn deliveries_of(db: &TestDb, ids: &[String]) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = db.connect().await;
    let count: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM webhook_deliveries WHERE submission_id = ANY($1)",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Text>, _>(ids)
    .get_result(&mut conn)
    .await
    .expect("deliveries of");
    count.n
}

/// Every delivery to an email destination, with its attempts: how many are recorded, how
/// many of them were late (a worker whose claim had been taken over) and how many the
/// mail server deferred (4xx).
#[derive(diesel::QueryableByName, Debug, Clone)]
pub struct EmailDelivery {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub destination_url: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempts: i32,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub late: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub deferred: i64,
}

pub async fn email_deliveries(db: &TestDb) -> Vec<EmailDelivery> {
    let mut conn = db.connect().await;
    diesel::sql_query(
        "SELECT d.id, d.destination_url, d.attempts,
                count(a.id) FILTER (WHERE a.late) AS late,
                count(a.id) FILTER (WHERE a.response_status BETWEEN 400 AND 499) AS deferred
         FROM webhook_deliveries d
         JOIN destinations dest ON dest.id = d.destination_id AND dest.kind = 'email'
         LEFT JOIN delivery_attempts a ON a.delivery_id = d.id
         GROUP BY d.id, d.destination_url, d.attempts",
    )
    .load(&mut conn)
    .await
    .expect("email deliveries")
}

/// Raises this process's open-file limit to its hard limit (tests that hold thousands of
/// sockets).
pub fn raise_open_files() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("rlimit");
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raise the open-file limit");
    hard
}
