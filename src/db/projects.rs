//! Queries on `projects`: a team's endpoints and the keys that may see them.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::models::ProjectRow;
use super::schema::{endpoints, projects};
use super::DbError;
use crate::model::ids::{DeliveryId, DestinationId, EndpointId, ProjectId, SubmissionId};

pub async fn insert(conn: &mut AsyncPgConnection, row: &ProjectRow) -> Result<(), DbError> {
    diesel::insert_into(projects::table)
        .values(row)
        .execute(conn)
        .await?;
    Ok(())
}

/// The project, unless it is deleted.
pub async fn find_live(
    conn: &mut AsyncPgConnection,
    id: &ProjectId,
) -> Result<Option<ProjectRow>, DbError> {
    Ok(projects::table
        .find(id)
        .filter(projects::deleted_at.is_null())
        .select(ProjectRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Projects not deleted, oldest first: every one, or only `only`.
pub async fn list_live(
    conn: &mut AsyncPgConnection,
    only: Option<&ProjectId>,
) -> Result<Vec<ProjectRow>, DbError> {
    let mut query = projects::table
        .filter(projects::deleted_at.is_null())
        .into_boxed();
    if let Some(id) = only {
        query = query.filter(projects::id.eq(id));
    }
    Ok(query
        .order((projects::created_at, projects::id))
        .select(ProjectRow::as_select())
        .load(conn)
        .await?)
}

/// Renames a live project; `None` when there is none.
pub async fn rename(
    conn: &mut AsyncPgConnection,
    id: &ProjectId,
    name: &str,
) -> Result<Option<ProjectRow>, DbError> {
    Ok(diesel::update(
        projects::table
            .find(id)
            .filter(projects::deleted_at.is_null()),
    )
    .set(projects::name.eq(name))
    .returning(ProjectRow::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// What deleting a project came to.
#[derive(Debug)]
pub enum ProjectDeletion {
    Deleted(ProjectRow),
    /// No live project has the id.
    NotFound,
    /// It still has this many endpoints not deleted.
    HasEndpoints(i64),
}

/// Marks a project deleted (its keys stop working from their next request) unless it
/// still has endpoints that are not deleted. The row is locked first, so that an endpoint
/// created into it concurrently either commits before (and is counted) or waits and then
/// finds the project gone.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    id: &ProjectId,
    now: DateTime<Utc>,
) -> Result<ProjectDeletion, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let locked: Option<ProjectId> = projects::table
            .find(id)
            .filter(projects::deleted_at.is_null())
            .select(projects::id)
            .for_update()
            .first(conn)
            .await
            .optional()?;
        if locked.is_none() {
            return Ok(ProjectDeletion::NotFound);
        }
        let endpoints: i64 = endpoints::table
            .filter(endpoints::project_id.eq(id))
            .filter(endpoints::deleted_at.is_null())
            .count()
            .get_result(conn)
            .await?;
        if endpoints > 0 {
            return Ok(ProjectDeletion::HasEndpoints(endpoints));
        }
        let row = diesel::update(projects::table.find(id))
            .set(projects::deleted_at.eq(now))
            .returning(ProjectRow::as_returning())
            .get_result(conn)
            .await?;
        Ok(ProjectDeletion::Deleted(row))
    })
    .await
}

/// Locks a live project against deletion for the rest of the transaction (`FOR KEY
/// SHARE`, so creating endpoints into one project does not queue behind another); `false`
/// when there is no live project with this id.
pub async fn hold_live(conn: &mut AsyncPgConnection, id: &ProjectId) -> Result<bool, DbError> {
    let held: Option<ProjectId> = projects::table
        .find(id)
        .filter(projects::deleted_at.is_null())
        .select(projects::id)
        .for_key_share()
        .first(conn)
        .await
        .optional()?;
    Ok(held.is_some())
}

/// Something that belongs to a project through its endpoint.
#[derive(Debug, Clone, Copy)]
pub enum Owned<'a> {
    Endpoint(&'a EndpointId),
    Destination(&'a DestinationId),
    Submission(&'a SubmissionId),
    Delivery(&'a DeliveryId),
}

/// The endpoint `target` belongs to; `None` when it does not exist.
async fn endpoint_of(
    conn: &mut AsyncPgConnection,
    target: Owned<'_>,
) -> Result<Option<EndpointId>, DbError> {
    use super::schema::{destinations, submissions, webhook_deliveries};
    let endpoint = match target {
        Owned::Endpoint(id) => return Ok(Some(id.clone())),
        Owned::Destination(id) => {
            destinations::table
                .find(id)
                .select(destinations::endpoint_id)
                .first(conn)
                .await
        }
        Owned::Submission(id) => {
            submissions::table
                .find(id)
                .select(submissions::endpoint_id)
                .first(conn)
                .await
        }
        Owned::Delivery(id) => {
            webhook_deliveries::table
                .find(id)
                .select(webhook_deliveries::endpoint_id)
                .first(conn)
                .await
        }
    };
    Ok(endpoint.optional()?)
}

/// The project `target` belongs to; `None` when it does not exist.
pub async fn owner_of(
    conn: &mut AsyncPgConnection,
    target: Owned<'_>,
) -> Result<Option<ProjectId>, DbError> {
    let Some(endpoint) = endpoint_of(conn, target).await? else {
        return Ok(None);
    };
    Ok(endpoints::table
        .find(&endpoint)
        .select(endpoints::project_id)
        .first(conn)
        .await
        .optional()?)
}

/// [`owner_of`], the endpoint's row held (`FOR KEY SHARE`) until the transaction ends, so
/// that the endpoint cannot be erased and its id taken by another project's endpoint
/// before the change that follows.
pub async fn owner_of_held(
    conn: &mut AsyncPgConnection,
    target: Owned<'_>,
) -> Result<Option<ProjectId>, DbError> {
    let Some(endpoint) = endpoint_of(conn, target).await? else {
        return Ok(None);
    };
    Ok(endpoints::table
        .find(&endpoint)
        .select(endpoints::project_id)
        .for_key_share()
        .first(conn)
        .await
        .optional()?)
}
