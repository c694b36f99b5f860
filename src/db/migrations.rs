//! The Diesel migrations embedded in the binary, and the ways of applying them.

use diesel_async::{AsyncMigrationHarness, AsyncPgConnection, RunQueryDsl};
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
    work: impl FnOnce(&mut AsyncMigrationHarness<AsyncPgConnection>) -> Result<T, MigrationError>,
) -> Result<T, MigrationError> {
    let mut connection = connect_one(url).await?;
    diesel::sql_query("SELECT pg_advisory_lock($1)")
        .bind::<diesel::sql_types::BigInt, _>(MIGRATION_LOCK_KEY)
        .execute(&mut connection)
        .await?;
    let mut harness = AsyncMigrationHarness::new(connection);
    let result = work(&mut harness);
    let mut connection = harness.into_inner();
    // Closing the connection would release the lock too; unlocking says so explicitly.
    diesel::sql_query("SELECT pg_advisory_unlock($1)")
        .bind::<diesel::sql_types::BigInt, _>(MIGRATION_LOCK_KEY)
        .execute(&mut connection)
        .await?;
    result
}

/// Every embedded migration, oldest first, with whether it is applied.
pub async fn status(url: &Secret) -> Result<Vec<MigrationStatus>, MigrationError> {
    let applied = with_lock(url, |harness| {
        harness.applied_migrations().map_err(migration_failed)
    })
    .await?;
    let mut all = diesel::migration::MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
        .map_err(migration_failed)?;
    all.sort_by(|a, b| a.name().version().cmp(&b.name().version()));
    Ok(all
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
    with_lock(url, |harness| {
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
    with_lock(url, |harness| {
        harness
            .revert_all_migrations(MIGRATIONS)
            .map(|reverted| reverted.len())
            .map_err(migration_failed)
    })
    .await
}
