//! Every mutation's change and its audit entry in one transaction, with the check that the
//! request sees what it changes; and the trail itself, for admins: `auditEntries`,
//! `auditEntryAdded`.

use async_graphql::connection::{Connection, Edge};
use async_graphql::{Context, Object, Subscription, ID};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::{Stream, StreamExt};

use super::error::Result;
use super::types::Timestamp;
use super::visibility::{key, view};
use super::{app, database, ClientAddress};
use crate::audit::Read;
use crate::db::audit::AuditRow;
use crate::db::projects::Owned;
use crate::db::{self, ConnectionWork, DbError};
use crate::error::ApiError;
use crate::model::ids::ProjectId;

/// What a change came to: its outcome, and what the audit entry names (`None`: nothing
/// changed, no entry).
pub(crate) struct Audited<T> {
    pub outcome: T,
    pub entry: Option<Entry>,
}

/// What an entry names beyond the operation and its arguments.
pub(crate) struct Entry {
    /// The ids the change was about.
    pub targets: Vec<String>,
    /// The project of what changed, when the mutation had no target to find it from (a
    /// new endpoint's, a key's).
    pub project: Option<ProjectId>,
}

impl<T> Audited<T> {
    /// A change about `targets`.
    pub fn changed(outcome: T, targets: Vec<String>) -> Audited<T> {
        Audited {
            outcome,
            entry: Some(Entry {
                targets,
                project: None,
            }),
        }
    }

    /// A change about `targets` in `project`.
    pub fn changed_in(outcome: T, targets: Vec<String>, project: Option<ProjectId>) -> Audited<T> {
        Audited {
            outcome,
            entry: Some(Entry { targets, project }),
        }
    }

    /// Nothing changed (a refusal, an unknown id): no entry.
    pub fn unchanged(outcome: T) -> Audited<T> {
        Audited {
            outcome,
            entry: None,
        }
    }
}

/// Runs `change` in one transaction with its audit entry. With a `target`, the request
/// must see the project it belongs to, checked in the same transaction (an endpoint
/// never changes project): otherwise `not_found()`, the answer an unknown id gets, and
/// nothing runs. The entry names the key, the operation and its arguments (secrets and
/// personal values redacted), the targets, the project and the client address's HMAC.
pub(crate) async fn audited<T, F>(
    ctx: &Context<'_>,
    target: Option<Owned<'_>>,
    not_found: impl FnOnce() -> ApiError,
    change: F,
) -> Result<T>
where
    T: Send,
    F: for<'c> ConnectionWork<'c, Audited<T>> + Send,
{
    let key = key(ctx);
    let view = view(ctx);
    let app = app(ctx);
    let arguments = ctx
        .field()
        .arguments()
        .map_err(|e| ApiError::Internal(format!("arguments: {}", e.message)))?;
    // Its targets and project are filled in once the change is known.
    let mut record = app
        .audit
        .record(Read {
            key,
            address: &ctx.data_unchecked::<ClientAddress>().0,
            operation: ctx.field().name(),
            targets: Vec::new(),
            arguments: serde_json::Value::Object(
                arguments
                    .into_iter()
                    .map(|(name, value)| {
                        let value = value.into_json().unwrap_or(serde_json::Value::Null);
                        (name.to_string(), value)
                    })
                    .collect(),
            ),
            project: None,
            at: app.clock.now(),
        })
        .await?;
    let written = database(ctx)
        .run(async move |conn: &mut AsyncPgConnection| {
            conn.transaction::<_, DbError, _>(async move |conn| {
                let owner = match target {
                    Some(target) => {
                        let owner = db::projects::owner_of_held(conn, target).await?;
                        if view.is_some() && owner.as_ref() != view {
                            return Ok(None);
                        }
                        owner
                    }
                    None => None,
                };
                let done = change(conn).await?;
                if let Some(entry) = done.entry {
                    record.project_id = owner.or(entry.project);
                    record.targets = entry.targets.into_iter().map(Some).collect();
                    db::audit::insert(conn, &record).await?;
                }
                Ok(Some(done.outcome))
            })
            .await
        })
        .await?;
    written.ok_or_else(|| not_found().into())
}

pub struct AuditEntry(pub AuditRow);

/// One change made through the management API (or one export of data): who, what, when
/// and from where, written in the change's own transaction.
#[Object]
impl AuditEntry {
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    async fn at(&self) -> Timestamp {
        Timestamp(self.0.record.at)
    }
    /// The key the change was made with (kept after the key is revoked).
    async fn key_id(&self) -> ID {
        ID(self.0.record.key_id.clone())
    }
    async fn key_name(&self) -> &str {
        &self.0.record.key_name
    }
    /// The project of what changed; `null`: no one project's (a key for every project).
    async fn project_id(&self) -> Option<ID> {
        self.0
            .record
            .project_id
            .as_ref()
            .map(|id| ID(id.to_string()))
    }
    /// The mutation (or `export`, `personData`).
    async fn operation(&self) -> &str {
        &self.0.record.operation
    }
    /// The ids it was about.
    async fn targets(&self) -> Vec<String> {
        self.0.record.targets.iter().flatten().cloned().collect()
    }
    /// Its arguments as JSON, every secret and personal value replaced by `"[redacted]"`.
    async fn changes(&self) -> async_graphql::Json<serde_json::Value> {
        async_graphql::Json(self.0.record.changes.clone())
    }
    /// HMAC-SHA256 of the client's address under the server's own key: the same address
    /// gives the same digest, and the address is never stored.
    async fn address_digest(&self) -> Option<&str> {
        self.0.record.address_digest.as_deref()
    }
}

#[derive(Default)]
pub struct AuditQuery;

#[Object]
impl AuditQuery {
    /// The audit trail, newest first (admin keys only; a project's key sees its project's
    /// entries). Kept for `FORMS_AUDIT_RETENTION_DAYS`.
    #[graphql(complexity = "super::pagination::page_complexity(first, child_complexity)")]
    async fn audit_entries(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, AuditEntry>> {
        key(ctx).require_admin()?;
        let limit = super::pagination::PageRequest::new(
            first,
            None,
            app(ctx).config.graphql.max_page_size,
        )?
        .fetch_limit();
        let before = match after {
            None => None,
            Some(cursor) => Some(cursor.parse::<i64>().map_err(|_| ApiError::InvalidCursor)?),
        };
        let project = view(ctx);
        let mut rows = database(ctx)
            .run(async |conn| db::audit::page(conn, project, before, limit).await)
            .await?;
        let has_next = rows.len() as i64 >= limit;
        if has_next {
            rows.truncate((limit - 1).max(0) as usize);
        }
        let mut connection = Connection::new(before.is_some(), has_next);
        connection.edges.extend(
            rows.into_iter()
                .map(|row| Edge::new(row.id.to_string(), AuditEntry(row))),
        );
        Ok(connection)
    }
}

#[derive(Default)]
pub struct AuditSubscription;

#[Subscription]
impl AuditSubscription {
    /// Every audit entry as it commits, in any process (admin keys only; a project's key
    /// gets its project's). Live only: entries committed while the subscription was not
    /// open are read with `auditEntries`.
    async fn audit_entry_added(&self, ctx: &Context<'_>) -> Result<impl Stream<Item = AuditEntry>> {
        key(ctx).require_admin()?;
        let db = database(ctx).clone();
        let view = view(ctx).cloned();
        let committed = futures_util::stream::unfold(app(ctx).audit.subscribe(), |mut ids| async {
            loop {
                match ids.recv().await {
                    Ok(id) => return Some((id, ids)),
                    // A subscriber that fell behind skips what it missed, as the doc says.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        Ok(committed.filter_map(move |id| {
            let (db, view) = (db.clone(), view.clone());
            async move {
                let row = db
                    .run(async |conn| db::audit::find(conn, id).await)
                    .await
                    .ok()??;
                let seen = view.is_none_or(|view| row.record.project_id.as_ref() == Some(&view));
                seen.then_some(AuditEntry(row))
            }
        }))
    }
}
