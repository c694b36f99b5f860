//! The GraphQL management API: schema, resolvers, the HTTP handler and the WebSocket
//! protocols (docs/graphql.md, docs/subscriptions.md).

mod access;
mod audit;
pub mod cost;
pub mod destination;
pub mod destination_mutation;
mod error;
pub mod fanout;
pub mod files;
pub mod handler;
mod ids;
pub mod listing;
pub mod loaders;
pub mod mutation;
pub mod pagination;
pub mod query;
pub mod spam;
mod spam_mutation;
pub mod subscription;
mod timestamp;
pub mod types;
mod visibility;
pub mod ws;

use async_graphql::parser::types::OperationType;
use async_graphql::{Context, Schema};
use chrono::{DateTime, Utc};

use crate::app::AppState;
use crate::auth::AuthenticatedKey;
use crate::db::Db;
use crate::error::ApiError;
use destination_mutation::DestinationMutation;
use loaders::Loaders;
use mutation::MutationRoot;
use query::QueryRoot;
use spam_mutation::SpamMutation;
use subscription::SubscriptionRoot;
use types::Timestamp;

pub type FormsSchema = Schema<Query, Mutation, Subscription>;

/// Every query: the endpoints', deliveries' and submissions' (query.rs), projects' and
/// keys' (access.rs) and the audit trail's (audit.rs).
#[derive(async_graphql::MergedObject, Default)]
pub struct Query(QueryRoot, access::AccessQuery, audit::AuditQuery);

/// Every mutation: the endpoints', replays and erasure (mutation.rs), the
/// destinations' (destination_mutation.rs), spam's (spam_mutation.rs), projects' and
/// keys' (access.rs).
#[derive(async_graphql::MergedObject, Default)]
pub struct Mutation(
    MutationRoot,
    DestinationMutation,
    SpamMutation,
    access::AccessMutation,
);

/// Every subscription: deliveries' and endpoints' (subscription.rs), the audit trail's.
#[derive(async_graphql::MergedSubscription, Default)]
pub struct Subscription(SubscriptionRoot, audit::AuditSubscription);

/// The schema with the query limits of the configuration, checked before execution.
pub fn build_schema(app: AppState) -> FormsSchema {
    let limits = app.config.graphql.clone();
    Schema::build(
        Query::default(),
        Mutation::default(),
        Subscription::default(),
    )
    // Judged by the extension, which answers with the catalogue's code and the figures.
    .extension(cost::ValidationLimits {
        max_depth: limits.max_depth,
        max_complexity: limits.max_complexity,
    })
    .data(app)
    .finish()
}

/// The SDL as `hymical-forms schema` prints it and `schema.graphql` holds it.
pub fn sdl() -> String {
    Schema::build(
        Query::default(),
        Mutation::default(),
        Subscription::default(),
    )
    .finish()
    .sdl()
}

pub use handler::routes;

pub(crate) fn app<'a>(ctx: &Context<'a>) -> &'a AppState {
    ctx.data_unchecked::<AppState>()
}

/// The database as one operation sees it: GraphQL's share of the pool, and for a query
/// or mutation an allowance of `FORMS_GRAPHQL_MAX_DATABASE_CALLS` calls, at most
/// [`OPERATION_CONNECTIONS`] at once.
pub struct OperationDb(pub Db);

/// Connections one operation may hold at once: its list levels load in parallel, but one
/// request cannot take GraphQL's whole share from the others.
const OPERATION_CONNECTIONS: usize = 2;

pub(crate) fn database<'a>(ctx: &Context<'a>) -> &'a Db {
    &ctx.data_unchecked::<OperationDb>().0
}

/// Attaches what every resolver finds in its context: the key, the operation's database
/// handle and loaders. A subscription lives for hours: its loaders keep no cache and its
/// calls have no allowance in all (each event's are few, and counted by the share).
pub(crate) fn with_operation_data(
    request: async_graphql::Request,
    operation: Option<OperationType>,
    app: &AppState,
    key: AuthenticatedKey,
    address: String,
) -> async_graphql::Request {
    let subscription = operation == Some(OperationType::Subscription);
    let allowance =
        |db: Db| db.for_operation(app.config.graphql.max_database_calls, OPERATION_CONNECTIONS);
    // Only a query may read the replica: a mutation's answer shows its own write, and a
    // subscription's events come from the primary's reader (its catch-up is the feed's
    // to route).
    let db = match operation {
        Some(OperationType::Subscription) => app.graphql_db.clone(),
        Some(OperationType::Query) => allowance(app.graphql_query_db()),
        Some(OperationType::Mutation) | None => allowance(app.graphql_db.clone()),
    };
    let loaders = if subscription {
        Loaders::uncached(&db)
    } else {
        Loaders::new(&db)
    };
    request
        .data(key)
        .data(ClientAddress(address))
        .data(loaders)
        .data(OperationDb(db))
}

/// The address the operation came from (through `FORMS_TRUSTED_PROXY_HOPS` proxies): only
/// its HMAC is ever written (the audit trail), never the address.
pub(crate) struct ClientAddress(pub String);

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

/// An input field of an update as the change it asks for: left out keeps, null clears.
pub(crate) fn patch<T>(field: async_graphql::MaybeUndefined<T>) -> crate::model::patch::Patch<T> {
    use crate::model::patch::Patch;
    match field {
        async_graphql::MaybeUndefined::Undefined => Patch::Keep,
        async_graphql::MaybeUndefined::Null => Patch::Clear,
        async_graphql::MaybeUndefined::Value(value) => Patch::Set(value),
    }
}

/// Exclusive time bounds: (after, before).
pub(crate) type TimeRange = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// Exclusive bounds: a range with nothing strictly inside (empty or inverted) is refused.
pub(crate) fn time_range(
    after: Option<Timestamp>,
    before: Option<Timestamp>,
) -> error::Result<TimeRange> {
    let (after, before) = (after.map(|t| t.0), before.map(|t| t.0));
    if crate::clock::is_empty_range(after, before) {
        return Err(ApiError::InvalidTimeRange.into());
    }
    Ok((after, before))
}
