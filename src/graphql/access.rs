//! Projects and management keys as the API shows and manages them: `projects`, `apiKeys`,
//! and the mutations that make, rename, expire, revoke and delete them. An admin key of
//! every project manages projects and every key; a project's admin key manages its own
//! project's keys; a read key manages nothing.

use async_graphql::{Context, InputObject, MaybeUndefined, Object, SimpleObject, ID};
use chrono::{DateTime, Utc};

use super::audit::{audited, Audited};
use super::error::Result;
use super::types::Timestamp;
use super::visibility::{key, view};
use super::{app, database, patch};
use crate::auth;
use crate::db;
use crate::db::models::{ManagementKeyRow, ProjectRow};
use crate::db::projects::ProjectDeletion;
use crate::error::ApiError;
use crate::model::endpoint as rules;
use crate::model::ids::{KeyId, ProjectId};
use crate::model::patch::Patch;
use crate::model::state::KeyRole;

pub struct Project(pub ProjectRow);

/// A team's endpoints and the keys that may see them.
#[Object]
impl Project {
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn created_at(&self) -> Timestamp {
        Timestamp(self.0.created_at)
    }
    /// Set once deleted: its keys no longer work.
    async fn deleted_at(&self) -> Option<Timestamp> {
        self.0.deleted_at.map(Timestamp)
    }
}

pub struct ApiKey(pub ManagementKeyRow);

/// A management key, described (the key itself is shown once, when made).
#[Object]
impl ApiKey {
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// `ADMIN`: everything. `READ`: queries and subscriptions only; every mutation and
    /// export is refused with `INSUFFICIENT_ROLE`.
    async fn role(&self) -> KeyRole {
        self.0.role
    }
    /// The one project it sees; `null`: every project.
    async fn project_id(&self) -> Option<ID> {
        self.0.project_id.as_ref().map(|id| ID(id.to_string()))
    }
    /// `hym_live_` and the next 8 characters: enough to tell keys apart.
    async fn display_prefix(&self) -> &str {
        &self.0.display_prefix
    }
    async fn created_at(&self) -> Timestamp {
        Timestamp(self.0.created_at)
    }
    /// When it stops working; `null`: never.
    async fn expires_at(&self) -> Option<Timestamp> {
        self.0.expires_at.map(Timestamp)
    }
    async fn revoked_at(&self) -> Option<Timestamp> {
        self.0.revoked_at.map(Timestamp)
    }
    /// The last request made with it, to the minute.
    async fn last_used_at(&self) -> Option<Timestamp> {
        self.0.last_used_at.map(Timestamp)
    }
}

#[derive(InputObject)]
pub struct CreateApiKeyInput {
    /// 1–200 characters: who or what holds it.
    pub name: String,
    pub role: KeyRole,
    /// Its one project; left out or `null`: every project (for a project's admin key,
    /// its own project, the only one it may give).
    pub project_id: Option<ID>,
    /// When it stops working (in the future); left out or `null`: never.
    pub expires_at: Option<Timestamp>,
}

/// A field left out is unchanged.
#[derive(InputObject)]
pub struct UpdateApiKeyInput {
    pub id: ID,
    pub name: Option<String>,
    /// A new expiry (in the future); `null`: never.
    pub expires_at: MaybeUndefined<Timestamp>,
}

#[derive(SimpleObject)]
pub struct CreateApiKeyPayload {
    pub api_key: ApiKey,
    /// The key itself: shown here only, never again (the server keeps its digest).
    pub key: String,
}

/// Whether this request may manage `row`: an admin key, and the key of its project (or of
/// every project, within the project its view is narrowed to).
fn manages(ctx: &Context<'_>, row: &ManagementKeyRow) -> bool {
    match view(ctx) {
        None => true,
        Some(view) => row.project_id.as_ref() == Some(view),
    }
}

/// An expiry a key may be given: in the future.
fn checked_expiry(
    expires_at: Option<Timestamp>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>> {
    match expires_at {
        Some(Timestamp(at)) if at <= now => Err(ApiError::InvalidInput {
            field: "expiresAt".into(),
            reason: "must be in the future".into(),
        }
        .into()),
        other => Ok(other.map(|t| t.0)),
    }
}

fn checked_name(raw: &str) -> Result<String> {
    rules::name(raw).map_err(|_| {
        ApiError::InvalidInput {
            field: "name".into(),
            reason: "must be 1 to 200 characters".into(),
        }
        .into()
    })
}

fn key_not_found(id: &ID) -> ApiError {
    ApiError::KeyNotFound {
        key_id: id.0.clone(),
    }
}

fn project_not_found(id: &ID) -> ApiError {
    ApiError::ProjectNotFound {
        project_id: id.0.clone(),
    }
}

#[derive(Default)]
pub struct AccessQuery;

#[Object]
impl AccessQuery {
    /// The projects this key sees (not deleted), oldest first: every one for a key of
    /// every project, its own for a project's key.
    async fn projects(&self, ctx: &Context<'_>) -> Result<Vec<Project>> {
        let only = view(ctx);
        let rows = database(ctx)
            .run(async |conn| db::projects::list_live(conn, only).await)
            .await?;
        Ok(rows.into_iter().map(Project).collect())
    }

    /// The keys this admin key may manage, oldest first, revoked and expired ones
    /// included: every key for a key of every project, its project's for a project's key.
    async fn api_keys(&self, ctx: &Context<'_>) -> Result<Vec<ApiKey>> {
        key(ctx).require_admin()?;
        let rows = database(ctx)
            .run(async |conn| db::keys::list(conn).await)
            .await?;
        Ok(rows
            .into_iter()
            .filter(|row| manages(ctx, row))
            .map(ApiKey)
            .collect())
    }
}

#[derive(Default)]
pub struct AccessMutation;

#[Object]
impl AccessMutation {
    /// A new project (an admin key of every project only).
    async fn create_project(&self, ctx: &Context<'_>, name: String) -> Result<Project> {
        key(ctx).require_installation_admin()?;
        let name = rules::name(&name).map_err(|_| ApiError::InvalidInput {
            field: "name".into(),
            reason: "must be 1 to 200 characters".into(),
        })?;
        let row = ProjectRow {
            id: ProjectId::generate(),
            name,
            created_at: app(ctx).clock.now(),
            deleted_at: None,
        };
        let never = || ApiError::Internal("a new project without a target".into());
        audited(ctx, None, never, async |conn| {
            db::projects::insert(conn, &row).await?;
            Ok(Audited::changed_in(
                Project(row.clone()),
                vec![row.id.to_string()],
                Some(row.id.clone()),
            ))
        })
        .await
    }

    /// Renames a project (an admin key of every project only).
    async fn rename_project(&self, ctx: &Context<'_>, id: ID, name: String) -> Result<Project> {
        key(ctx).require_installation_admin()?;
        let name = rules::name(&name).map_err(|_| ApiError::InvalidInput {
            field: "name".into(),
            reason: "must be 1 to 200 characters".into(),
        })?;
        let project = ProjectId::parse(&id).ok_or_else(|| project_not_found(&id))?;
        let renamed = audited(
            ctx,
            None,
            || project_not_found(&id),
            async |conn| {
                Ok(match db::projects::rename(conn, &project, &name).await? {
                    Some(row) => {
                        let targets = vec![row.id.to_string()];
                        Audited::changed_in(Some(row), targets, Some(project.clone()))
                    }
                    None => Audited::unchanged(None),
                })
            },
        )
        .await?;
        Ok(Project(renamed.ok_or_else(|| project_not_found(&id))?))
    }

    /// Deletes a project that has no endpoints left (deleted ones aside; otherwise
    /// `PROJECT_NOT_EMPTY`): its keys stop working from their next request, and its
    /// name stays for the audit trail. The default project can be deleted too once
    /// empty; endpoints created without a project then need one named.
    async fn delete_project(&self, ctx: &Context<'_>, id: ID) -> Result<Project> {
        key(ctx).require_installation_admin()?;
        let project = ProjectId::parse(&id).ok_or_else(|| project_not_found(&id))?;
        let now = app(ctx).clock.now();
        let deletion = audited(
            ctx,
            None,
            || project_not_found(&id),
            async |conn| {
                let deletion = db::projects::delete(conn, &project, now).await?;
                Ok(match deletion {
                    ProjectDeletion::Deleted(_) => Audited::changed_in(
                        deletion,
                        vec![project.to_string()],
                        Some(project.clone()),
                    ),
                    _ => Audited::unchanged(deletion),
                })
            },
        )
        .await?;
        match deletion {
            ProjectDeletion::Deleted(row) => Ok(Project(row)),
            ProjectDeletion::NotFound => Err(project_not_found(&id).into()),
            ProjectDeletion::HasEndpoints(endpoints) => Err(ApiError::ProjectNotEmpty {
                project_id: id.0,
                endpoints,
            }
            .into()),
        }
    }

    /// Makes a key. The key itself is in the answer only. A project's admin key (or a
    /// key of every project narrowed to one by `Hymical-Project`) makes keys of that
    /// project only (another: `PROJECT_NOT_FOUND`).
    async fn create_api_key(
        &self,
        ctx: &Context<'_>,
        input: CreateApiKeyInput,
    ) -> Result<CreateApiKeyPayload> {
        key(ctx).require_admin()?;
        let name = checked_name(&input.name)?;
        let now = app(ctx).clock.now();
        let expires_at = checked_expiry(input.expires_at, now)?;
        // A key is made in the project this request sees (a project's key: its own; a key
        // of every project narrowed by `Hymical-Project`: that one), or any for a key of
        // every project that is not narrowed.
        let project = match (&input.project_id, view(ctx)) {
            (None, own) => own.cloned(),
            (Some(asked), own) => {
                let id = ProjectId::parse(asked).ok_or_else(|| project_not_found(asked))?;
                if own.is_some_and(|own| *own != id) {
                    return Err(project_not_found(asked).into());
                }
                Some(id)
            }
        };
        let mut new = auth::generate(&name, input.role, now);
        new.row.project_id = project.clone();
        new.row.expires_at = expires_at;
        let row = new.row.clone();
        let missing = || match &input.project_id {
            Some(asked) => project_not_found(asked),
            None => ApiError::Internal("a key's own project is gone".into()),
        };
        let made = audited(ctx, None, missing, async |conn| {
            if let Some(project) = &row.project_id {
                if !db::projects::hold_live(conn, project).await? {
                    return Ok(Audited::unchanged(false));
                }
            }
            db::keys::insert(conn, &row).await?;
            Ok(Audited::changed_in(
                true,
                vec![row.id.to_string()],
                row.project_id.clone(),
            ))
        })
        .await?;
        if !made {
            return Err(missing().into());
        }
        Ok(CreateApiKeyPayload {
            api_key: ApiKey(new.row),
            key: new.key.expose().to_string(),
        })
    }

    /// Renames a key or changes its expiry.
    async fn update_api_key(&self, ctx: &Context<'_>, input: UpdateApiKeyInput) -> Result<ApiKey> {
        key(ctx).require_admin()?;
        let name = input.name.as_deref().map(checked_name).transpose()?;
        let now = app(ctx).clock.now();
        let expires_at = match patch(input.expires_at) {
            Patch::Keep => None,
            Patch::Clear => Some(None),
            Patch::Set(at) => Some(checked_expiry(Some(at), now)?),
        };
        let id = KeyId::parse(&input.id).ok_or_else(|| key_not_found(&input.id))?;
        let updated = audited(
            ctx,
            None,
            || key_not_found(&input.id),
            async |conn| {
                let Some(current) = db::keys::find(conn, &id).await? else {
                    return Ok(Audited::unchanged(None));
                };
                if !manages(ctx, &current) {
                    return Ok(Audited::unchanged(None));
                }
                let row = db::keys::update(conn, &id, name.as_deref(), expires_at).await?;
                let project = current.project_id.clone();
                Ok(Audited::changed_in(row, vec![id.to_string()], project))
            },
        )
        .await?;
        Ok(ApiKey(updated.ok_or_else(|| key_not_found(&input.id))?))
    }

    /// Revokes a key: refused from its next request on, in every process; its
    /// subscriptions end within a second. Revoking a revoked key changes nothing.
    async fn revoke_api_key(&self, ctx: &Context<'_>, id: ID) -> Result<ApiKey> {
        key(ctx).require_admin()?;
        let key_id = KeyId::parse(&id).ok_or_else(|| key_not_found(&id))?;
        let now = app(ctx).clock.now();
        let revoked = audited(
            ctx,
            None,
            || key_not_found(&id),
            async |conn| {
                let Some(current) = db::keys::find(conn, &key_id).await? else {
                    return Ok(Audited::unchanged(None));
                };
                if !manages(ctx, &current) {
                    return Ok(Audited::unchanged(None));
                }
                if current.revoked_at.is_some() {
                    return Ok(Audited::unchanged(Some(current)));
                }
                let row = db::keys::revoke(conn, &key_id, now).await?;
                let project = current.project_id.clone();
                Ok(Audited::changed_in(row, vec![key_id.to_string()], project))
            },
        )
        .await?;
        Ok(ApiKey(revoked.ok_or_else(|| key_not_found(&id))?))
    }
}
