//! The GraphQL management API: schema, resolvers, the HTTP handler and the WebSocket
//! protocols (docs/graphql.md, docs/subscriptions.md).

pub mod cost;
pub mod fanout;
pub mod handler;
pub mod loaders;
pub mod mutation;
pub mod pagination;
pub mod query;
pub mod subscription;
pub mod types;
pub mod ws;

use async_graphql::{Context, ErrorExtensions, Schema};
use chrono::{DateTime, Utc};

use crate::app::AppState;
use crate::error::ApiError;
use mutation::MutationRoot;
use query::QueryRoot;
use subscription::SubscriptionRoot;
use types::Timestamp;

pub type FormsSchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// The schema with the query limits of the configuration, checked before execution.
pub fn build_schema(app: AppState) -> FormsSchema {
    let limits = app.config.graphql.clone();
    Schema::build(QueryRoot, MutationRoot, SubscriptionRoot)
        .limit_depth(limits.max_depth)
        .limit_complexity(limits.max_complexity)
        .data(app)
        .finish()
}

/// The SDL as `hymical-forms schema` prints it and `schema.graphql` holds it.
pub fn sdl() -> String {
    Schema::build(QueryRoot, MutationRoot, SubscriptionRoot)
        .finish()
        .sdl()
}

pub use handler::routes;

pub(crate) fn app<'a>(ctx: &Context<'a>) -> &'a AppState {
    ctx.data_unchecked::<AppState>()
}

/// Turns any failure into the GraphQL error of the one catalogue (`extensions.code`,
/// `extensions.details`). async-graphql would also convert any `Display` type into an
/// error without a code, so resolvers go through this rather than plain `?`.
pub(crate) trait ResultExt<T> {
    fn gql(self) -> async_graphql::Result<T>;
}

impl<T, E: Into<ApiError>> ResultExt<T> for Result<T, E> {
    fn gql(self) -> async_graphql::Result<T> {
        self.map_err(|error| error.into().extend())
    }
}

/// An id argument of a filter as the typed id it must be: `Some(None)` for no filter,
/// `Some(Some(id))` for a filter, `None` when the argument cannot name anything (the filter
/// matches nothing, as one for an id no row has would).
pub(crate) fn scope<T>(
    id: Option<&async_graphql::ID>,
    parse: fn(&str) -> Option<T>,
) -> Option<Option<T>> {
    match id {
        None => Some(None),
        Some(id) => parse(id).map(Some),
    }
}

/// Exclusive time bounds: (after, before).
pub(crate) type TimeRange = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// Exclusive bounds: a range with nothing strictly inside (empty or inverted) is refused.
pub(crate) fn time_range(
    after: Option<Timestamp>,
    before: Option<Timestamp>,
) -> async_graphql::Result<TimeRange> {
    let (after, before) = (after.map(|t| t.0), before.map(|t| t.0));
    if crate::clock::is_empty_range(after, before) {
        return Err(ApiError::InvalidTimeRange).gql();
    }
    Ok((after, before))
}
