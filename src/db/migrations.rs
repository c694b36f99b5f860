//! The Diesel migrations embedded in the binary, and the ways of applying them.

use diesel_async::{AsyncMigrationHarness, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use super::{connect_one, DbError};
use crate::config::Secret;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Held while migrating, so that several processes starting together migrate once: the
/// others wait, then find nothing pending. ("hymical" in ASCII, then 1.)
const MIGRATION_LOCK_KEY: i64 = 0x6879_6d69_6361_6c01;

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error(transparent)]
    Database(#[from] DbError),
    #[error("migration failed: {0}")]
    Migration(String),
    /// The database is not one to migrate (or adopt) as it is; nothing was changed.
    #[error("{0}")]
    Refused(String),
}

impl From<diesel::result::Error> for MigrationError {
    fn from(error: diesel::result::Error) -> Self {
        MigrationError::Database(DbError::Query(error))
    }
}

fn migration_failed(error: impl std::fmt::Display) -> MigrationError {
    MigrationError::Migration(error.to_string())
}

/// One embedded migration and whether the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    pub name: String,
    pub applied: bool,
}

// The harness drives Diesel's synchronous migration code with `block_in_place`, so these
// functions need the multi-threaded tokio runtime (which `main` and the tests use).
//
// Every function holds the advisory lock: even reading the status creates Diesel's
// bookkeeping table when it is missing, and two processes creating it at once collide.

/// Runs `work` on a harness whose connection holds the migration lock.
async fn with_lock<T>(
    url: &Secret,
    applying: bool,
    work: impl FnOnce(&mut AsyncMigrationHarness<AsyncPgConnection>) -> Result<T, MigrationError>,
) -> Result<T, MigrationError> {
    let mut connection = connect_one(url).await?;
    lock(&mut connection).await?;
    // Before anything is created: a database of the earlier service is taken over only
    // by `migrate --adopt`.
    if let Some(revision) = earlier_service_revision(&mut connection).await? {
        unlock(&mut connection).await?;
        return Err(MigrationError::Refused(format!(
            "this database was left by the earlier Python service (hymical-forms 0.2, Alembic revision {revision}); nothing was changed. Stop that service, then run `hymical-forms migrate --adopt` to take the database over"
        )));
    }
    if applying {
        if let Err(error) = drop_interrupted_index_builds(&mut connection).await {
            unlock(&mut connection).await?;
            return Err(error);
        }
    }
    let mut harness = AsyncMigrationHarness::new(connection);
    let result = work(&mut harness);
    let mut connection = harness.into_inner();
    unlock(&mut connection).await?;
    result
}

/// Drops the invalid indexes a failed or killed `CREATE INDEX CONCURRENTLY` leaves behind.
/// The migrations that build indexes concurrently say `IF NOT EXISTS` (a migration that
/// runs outside a transaction is not undone when it fails, and must be safe to run again),
/// which would take such a leftover for a finished index; dropped here, it is rebuilt by
/// the migration that is still pending. Builds in progress are left alone (another
/// process's, not ours: ours hold the migration lock).
async fn drop_interrupted_index_builds(
    connection: &mut AsyncPgConnection,
) -> Result<(), MigrationError> {
    let drops: Vec<Name> = diesel::sql_query(
        "SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I.%I', n.nspname, c.relname) AS name \
         FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE NOT i.indisvalid AND n.nspname = current_schema() \
           AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)",
    )
    .load(connection)
    .await?;
    for drop in drops {
        // One statement per string: a string of several runs as one transaction, and
        // CONCURRENTLY refuses to run in one.
        connection.batch_execute(&drop.name).await?;
        tracing::warn!(statement = %drop.name, "dropped an index whose concurrent build was interrupted; the pending migration builds it again");
    }
    Ok(())
}

/// Waits for the migration lock (see [`MIGRATION_LOCK_KEY`]) by trying it every 200 ms.
/// Not `pg_advisory_lock`: a session blocked in that call holds a snapshot all the while,
/// and `CREATE INDEX CONCURRENTLY` in the migrating process waits for every older snapshot
/// to go, so the two would wait on each other until the deadlock detector failed one.
async fn lock(connection: &mut AsyncPgConnection) -> Result<(), MigrationError> {
    #[derive(diesel::QueryableByName)]
    struct Locked {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        locked: bool,
    }
    let mut said = false;
    loop {
        let attempt: Locked = diesel::sql_query("SELECT pg_try_advisory_lock($1) AS locked")
            .bind::<diesel::sql_types::BigInt, _>(MIGRATION_LOCK_KEY)
            .get_result(connection)
            .await?;
        if attempt.locked {
            return Ok(());
        }
        if !said {
            tracing::info!("another process is migrating the database; waiting for it");
            said = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Closing the connection would release the lock too; unlocking says so explicitly.
async fn unlock(connection: &mut AsyncPgConnection) -> Result<(), MigrationError> {
    diesel::sql_query("SELECT pg_advisory_unlock($1)")
        .bind::<diesel::sql_types::BigInt, _>(MIGRATION_LOCK_KEY)
        .execute(connection)
        .await?;
    Ok(())
}

/// The tables the earlier Python service (0.2) creates, at its last revision.
const EARLIER_SERVICE_TABLES: &[&str] = &[
    "alembic_version",
    "delivery_attempts",
    "endpoints",
    "management_api_keys",
    "rate_limit_counters",
    "submissions",
    "webhook_deliveries",
];

/// The earlier service's last revision, the only one whose schema adoption knows.
pub const ADOPTABLE_REVISION: &str = "0006";

static ADOPT_PYTHON_0006: &str = include_str!("sql/adopt_python_0006.sql");

#[derive(diesel::QueryableByName)]
struct Name {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
}

/// The Alembic revision(s) recorded in `alembic_version`, if the table exists.
async fn earlier_service_revision(
    connection: &mut AsyncPgConnection,
) -> Result<Option<String>, MigrationError> {
    let exists: Vec<Name> = diesel::sql_query(
        "SELECT 'alembic_version' AS name WHERE to_regclass('public.alembic_version') IS NOT NULL",
    )
    .load(connection)
    .await?;
    if exists.is_empty() {
        return Ok(None);
    }
    let revisions: Vec<Name> =
        diesel::sql_query("SELECT version_num::text AS name FROM alembic_version ORDER BY 1")
            .load(connection)
            .await?;
    let revisions: Vec<String> = revisions.into_iter().map(|r| r.name).collect();
    Ok(Some(if revisions.is_empty() {
        "none".to_string()
    } else {
        revisions.join(", ")
    }))
}

/// Takes over a database the earlier Python service left at Alembic revision
/// [`ADOPTABLE_REVISION`]: checks the revision and the tables (refusing, with nothing
/// changed, any other revision or any table the earlier service does not make), converts
/// the schema to this product's first migration and records it as applied, all in one
/// transaction; then applies the later migrations. Returns the versions applied after the
/// baseline.
pub async fn adopt(url: &Secret) -> Result<Vec<String>, MigrationError> {
    use diesel_async::{AsyncConnection, SimpleAsyncConnection};
    let mut connection = connect_one(url).await?;
    lock(&mut connection).await?;
    let adopted = async {
        let Some(revision) = earlier_service_revision(&mut connection).await? else {
            return Err(MigrationError::Refused(
                "nothing to adopt: this database has no Alembic revision of the earlier Python service (a database of this product is migrated with `hymical-forms migrate`)".into(),
            ));
        };
        if revision != ADOPTABLE_REVISION {
            return Err(MigrationError::Refused(format!(
                "the earlier service left this database at Alembic revision {revision}; only {ADOPTABLE_REVISION} (hymical-forms 0.2) can be adopted: upgrade the earlier service to 0.2 and run its migrations first. Nothing was changed"
            )));
        }
        let tables: Vec<Name> = diesel::sql_query(
            "SELECT tablename::text AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
        )
        .load(&mut connection)
        .await?;
        let tables: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
        let foreign: Vec<&str> = tables
            .iter()
            .copied()
            .filter(|t| !EARLIER_SERVICE_TABLES.contains(t))
            .collect();
        let missing: Vec<&str> = EARLIER_SERVICE_TABLES
            .iter()
            .copied()
            .filter(|t| !tables.contains(t))
            .collect();
        if !foreign.is_empty() || !missing.is_empty() {
            return Err(MigrationError::Refused(format!(
                "this database holds more or less than the earlier service's tables (not the earlier service's: {}; missing: {}); adoption takes over only a database the earlier service has to itself. Nothing was changed",
                list(&foreign),
                list(&missing)
            )));
        }
        let baseline = first_migration_version()?;
        connection
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                conn.batch_execute(ADOPT_PYTHON_0006).await?;
                diesel::sql_query("INSERT INTO __diesel_schema_migrations (version) VALUES ($1)")
                    .bind::<diesel::sql_types::Text, _>(&baseline)
                    .execute(conn)
                    .await?;
                Ok(())
            })
            .await
            .map_err(|error| {
                MigrationError::Refused(format!(
                    "the earlier service's data does not fit this product's schema ({error}); nothing was changed"
                ))
            })
    }
    .await;
    unlock(&mut connection).await?;
    adopted?;
    run_pending(url).await
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Every embedded migration, oldest first.
fn embedded_migrations(
) -> Result<Vec<Box<dyn diesel::migration::Migration<diesel::pg::Pg>>>, MigrationError> {
    let mut all = diesel::migration::MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
        .map_err(migration_failed)?;
    all.sort_by(|a, b| a.name().version().cmp(&b.name().version()));
    Ok(all)
}

/// The version Diesel records for this product's first migration.
fn first_migration_version() -> Result<String, MigrationError> {
    <[_]>::first(&embedded_migrations()?)
        .map(|migration| migration.name().version().to_string())
        .ok_or_else(|| MigrationError::Migration("no migrations are embedded".into()))
}

/// Every embedded migration, oldest first, with whether it is applied.
pub async fn status(url: &Secret) -> Result<Vec<MigrationStatus>, MigrationError> {
    let applied = with_lock(url, false, |harness| {
        harness.applied_migrations().map_err(migration_failed)
    })
    .await?;
    Ok(embedded_migrations()?
        .iter()
        .map(|migration| MigrationStatus {
            name: migration.name().to_string(),
            applied: applied.contains(&migration.name().version()),
        })
        .collect())
}

/// Names of the migrations not yet applied.
pub async fn pending(url: &Secret) -> Result<Vec<String>, MigrationError> {
    Ok(status(url)
        .await?
        .into_iter()
        .filter(|m| !m.applied)
        .map(|m| m.name)
        .collect())
}

/// Applies every pending migration; returns the versions applied. Processes that start
/// together wait for each other on the lock, and the later ones find nothing pending.
pub async fn run_pending(url: &Secret) -> Result<Vec<String>, MigrationError> {
    with_lock(url, true, |harness| {
        harness
            .run_pending_migrations(MIGRATIONS)
            .map(|versions| versions.iter().map(|v| v.to_string()).collect())
            .map_err(migration_failed)
    })
    .await
}

/// Reverts every applied migration, newest first (used by the migration round-trip test).
#[cfg(any(test, feature = "testing"))]
pub async fn revert_all(url: &Secret) -> Result<usize, MigrationError> {
    with_lock(url, false, |harness| {
        harness
            .revert_all_migrations(MIGRATIONS)
            .map(|reverted| reverted.len())
            .map_err(migration_failed)
    })
    .await
}

/// Reverts the `count` newest applied migrations, newest first; returns their versions
/// (used by the tests that migrate a database of an earlier layout, with rows, in place).
#[cfg(any(test, feature = "testing"))]
pub async fn revert_newest(url: &Secret, count: usize) -> Result<Vec<String>, MigrationError> {
    with_lock(url, false, |harness| {
        (0..count)
            .map(|_| {
                harness
                    .revert_last_migration(MIGRATIONS)
                    .map(|version| version.to_string())
                    .map_err(migration_failed)
            })
            .collect()
    })
    .await
}
