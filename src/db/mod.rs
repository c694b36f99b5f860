//! Everything that speaks SQL: the connection pool, the embedded cluster, migrations, the
//! generated schema and the queries of each concern. No other module builds a query.

pub mod cluster;
pub mod deliveries;
pub mod endpoints;
pub mod events;
pub mod keys;
pub mod listen;
pub mod migrations;
pub mod prepared;
pub mod rate_limits;
pub mod schema;
pub mod submissions;

use std::time::Duration;

use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::config::Secret;

pub type DbPool = bb8::Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;
pub type DbConnection<'a> =
    bb8::PooledConnection<'a, AsyncDieselConnectionManager<AsyncPgConnection>>;

/// A failure to reach or use the database. Callers map every variant to
/// `503 storage_unavailable`; the text is for logs and never reaches a client.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database query failed: {0}")]
    Query(#[from] diesel::result::Error),
    #[error("no database connection available: {0}")]
    Pool(String),
    #[error("cannot connect to the database: {0}")]
    Connect(#[from] diesel::ConnectionError),
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for DbError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        DbError::Pool(error.to_string())
    }
}

/// How long a request waits for a free connection before it is answered with 503.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// The pool shared by the HTTP server and the worker. Every connection gets the
/// statement timeout, so no request or job can hold a connection for ever.
pub async fn connect_pool(
    url: &Secret,
    size: u32,
    statement_timeout: Duration,
) -> Result<DbPool, DbError> {
    connect_counted_pool(url, size, statement_timeout, None).await
}

/// Counts the statements a pool's connections run (tests prove that nested lists are
/// batched by counting them).
pub type StatementCounter = std::sync::Arc<std::sync::atomic::AtomicUsize>;

/// [`connect_pool`], optionally counting every statement into `counter`.
pub async fn connect_counted_pool(
    url: &Secret,
    size: u32,
    statement_timeout: Duration,
    counter: Option<StatementCounter>,
) -> Result<DbPool, DbError> {
    let mut manager_config = ManagerConfig::default();
    let timeout_ms = statement_timeout.as_millis().max(1);
    manager_config.custom_setup = Box::new(move |url| {
        let counter = counter.clone();
        Box::pin(async move {
            let mut connection = AsyncPgConnection::establish(url).await?;
            connection
                .batch_execute(&format!(
                    "SET statement_timeout = {timeout_ms}; SET application_name = 'hymical-forms'"
                ))
                .await
                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
            // Counted from here: a connection's own set-up is no statement of a request.
            if let Some(counter) = counter {
                connection.set_instrumentation(
                    move |event: diesel::connection::InstrumentationEvent<'_>| {
                        if matches!(
                            event,
                            diesel::connection::InstrumentationEvent::StartQuery { .. }
                        ) {
                            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    },
                );
            }
            Ok(connection)
        })
    });
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(
        url.expose(),
        manager_config,
    );
    let pool = bb8::Pool::builder()
        .max_size(size)
        .connection_timeout(CHECKOUT_TIMEOUT)
        // Broken connections are noticed when a query fails; a ping before every
        // checkout would add a round trip to every request.
        .test_on_check_out(false)
        .build(manager)
        .await
        .map_err(|e| DbError::Pool(e.to_string()))?;
    // Fail at start-up, not on the first request, when the database cannot be reached.
    drop(pool.get().await?);
    Ok(pool)
}

/// One connection outside the pool, for migrations and administrative commands.
pub async fn connect_one(url: &Secret) -> Result<AsyncPgConnection, DbError> {
    Ok(AsyncPgConnection::establish(url.expose()).await?)
}

/// `SELECT 1` through the pool: the readiness probe.
pub async fn ping(pool: &DbPool) -> Result<(), DbError> {
    let mut connection = pool.get().await?;
    diesel::sql_query("SELECT 1")
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// Creates `database` on the server of `admin_url` unless it exists.
pub async fn create_database_if_missing(admin_url: &Secret, database: &str) -> Result<(), DbError> {
    use diesel::sql_types::Text;
    #[derive(diesel::QueryableByName)]
    struct Found {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        found: bool,
    }
    let mut connection = connect_one(admin_url).await?;
    let existing: Found =
        diesel::sql_query("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS found")
            .bind::<Text, _>(database)
            .get_result(&mut connection)
            .await?;
    if !existing.found {
        diesel::sql_query(format!("CREATE DATABASE {}", quote_identifier(database)))
            .execute(&mut connection)
            .await?;
    }
    Ok(())
}

/// `(time_column, id_column) < (time, id)`: the keyset condition for "after this row" in a
/// newest-first listing, as one row comparison so that PostgreSQL can use the index.
pub fn keyset_before(
    time_column: &'static str,
    id_column: &'static str,
    time: chrono::DateTime<chrono::Utc>,
    id: String,
) -> diesel::expression::SqlLiteral<
    diesel::sql_types::Bool,
    impl diesel::query_builder::QueryFragment<diesel::pg::Pg>,
> {
    use diesel::sql_types::{Text, Timestamptz};
    diesel::dsl::sql::<diesel::sql_types::Bool>("(")
        .sql(time_column)
        .sql(", ")
        .sql(id_column)
        .sql(") < (")
        .bind::<Timestamptz, _>(time)
        .sql(", ")
        .bind::<Text, _>(id)
        .sql(")")
}

/// Quotes an identifier for the few statements (CREATE DATABASE) that take no parameters.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
