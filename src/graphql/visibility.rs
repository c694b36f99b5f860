//! What one request sees: every project, or the one project of its key (or the one a key
//! for every project narrowed to with the `Hymical-Project` header). Whatever belongs to
//! a project the request does not see is answered as if it did not exist: a lookup finds
//! nothing, a listing leaves it out, a mutation answers its not-found error (checked in
//! the mutation's own transaction by `audit::audited`).

use async_graphql::Context;

use super::error::Result;
use super::loaders::Loaders;
use crate::auth::AuthenticatedKey;
use crate::model::ids::{EndpointId, ProjectId};

pub(crate) fn key<'a>(ctx: &Context<'a>) -> &'a AuthenticatedKey {
    ctx.data_unchecked::<AuthenticatedKey>()
}

/// The one project this request sees; `None`: every project.
pub(crate) fn view<'a>(ctx: &Context<'a>) -> Option<&'a ProjectId> {
    key(ctx).view.as_ref()
}

/// Whether this request sees what belongs to `project`.
pub(crate) fn sees(ctx: &Context<'_>, project: &ProjectId) -> bool {
    view(ctx).is_none_or(|view| view == project)
}

/// Whether this request sees the endpoint `id` (through the request's loader, which a
/// response's other lookups of the endpoint share). A request that sees every project
/// sees it without a query.
pub(crate) async fn sees_endpoint(ctx: &Context<'_>, id: &EndpointId) -> Result<bool> {
    if view(ctx).is_none() {
        return Ok(true);
    }
    let row = ctx
        .data_unchecked::<Loaders>()
        .endpoints
        .load_one(id.clone())
        .await?;
    Ok(row.is_some_and(|row| sees(ctx, &row.project_id)))
}
