//! `server_secrets`: keys the server makes once and every process shares (the first
//! process to need one inserts it, the others read it): `file_links` signs the download
//! links of files, `form_stamp` the form stamps of intake's minimum fill time.

use std::sync::Arc;

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::server_secrets;
use super::{Db, DbError};

/// The key named `name`: a new random one stored when none exists yet, else the stored
/// one.
pub async fn load(db: &Db, name: &str) -> Result<Arc<[u8]>, DbError> {
    let candidate: [u8; 32] = rand::random();
    // A concurrent first insert is committed by the time ours returns (ON CONFLICT waits
    // for it), so the second read finds it.
    for _ in 0..2 {
        let stored = db
            .run(async |conn| get_or_insert(conn, name, &candidate).await)
            .await?;
        if let Some(key) = stored {
            return Ok(key.into());
        }
    }
    Err(DbError::Query(diesel::result::Error::NotFound))
}

/// The key named `name`: `candidate` when this call is the first to ask (it is stored),
/// the stored one otherwise. `None` only if a concurrent first insert has not committed
/// in this statement's snapshot: ask again.
async fn get_or_insert(
    conn: &mut AsyncPgConnection,
    name: &str,
    candidate: &[u8],
) -> Result<Option<Vec<u8>>, DbError> {
    diesel::insert_into(server_secrets::table)
        .values((
            server_secrets::name.eq(name),
            server_secrets::secret.eq(candidate),
        ))
        .on_conflict(server_secrets::name)
        .do_nothing()
        .execute(conn)
        .await?;
    Ok(server_secrets::table
        .find(name)
        .select(server_secrets::secret)
        .first(conn)
        .await
        .optional()?)
}
