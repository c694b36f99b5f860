//! How a newest-first listing is paged (its two kinds, submissions and deliveries, are
//! `types::Submissions` and `types::Deliveries`): on their own
//! (`Query.submissions`, `Query.deliveries`, filtered) and below an endpoint
//! (`Endpoint.submissions`, `Endpoint.deliveries`), whose first pages for every endpoint
//! of a response load together in one statement.

use std::future::Future;

use async_graphql::connection::Connection;
use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};
use async_graphql::{Context, Lookahead, OutputType};
use diesel_async::AsyncPgConnection;

use super::error::Result;
use super::loaders::{FirstPage, LoadError, Loaders};
use super::pagination::{PageRequest, Position};
use super::{app, database};
use crate::db::DbError;
use crate::model::ids::EndpointId;

/// What a listing is made of: its rows, how each is shown, filtered, positioned and loaded.
pub trait Listing {
    type Row: Clone + Send + Sync + 'static;
    type Node: OutputType;
    type Filter: Sync;
    type FirstPages: Loader<FirstPage, Value = Vec<Self::Row>, Error = LoadError>;

    /// The filter of one endpoint's rows.
    fn of_endpoint(endpoint: &EndpointId) -> Self::Filter;
    /// The loader of endpoints' first pages.
    fn first_pages(loaders: &Loaders) -> &DataLoader<Self::FirstPages, HashMapCache>;
    /// `limit` rows after `after`, newest first.
    fn page<'a>(
        conn: &'a mut AsyncPgConnection,
        filter: &'a Self::Filter,
        after: Option<Position>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Self::Row>, DbError>> + Send + 'a;
    /// Loads what the selection below the rows (`node`) will ask for, a query per level.
    fn prime<'a>(
        ctx: &'a Context<'_>,
        node: Lookahead<'a>,
        rows: &'a [Self::Row],
    ) -> impl Future<Output = Result<(), LoadError>> + 'a;
    /// The row's place in the order: its time and id.
    fn position(row: &Self::Row) -> Position;
    fn node(row: Self::Row) -> Self::Node;
}

/// A page of the listing under `filter`, with what its rows' selection needs loaded.
pub async fn page<L: Listing>(
    ctx: &Context<'_>,
    filter: &L::Filter,
    page: PageRequest,
) -> Result<Connection<String, L::Node>> {
    let after = page.after.clone();
    let limit = page.fetch_limit();
    let rows = database(ctx)
        .run(async |conn| L::page(conn, filter, after, limit).await)
        .await?;
    L::prime(ctx, ctx.look_ahead().field("edges").field("node"), &rows).await?;
    Ok(page.connection(rows, L::position, L::node))
}

/// A page of one endpoint's rows: the first through the loader that loads the first pages
/// of every endpoint of the response together, the later ones on their own.
pub async fn endpoint_page<L: Listing>(
    ctx: &Context<'_>,
    endpoint: &EndpointId,
    first: Option<i32>,
    after: Option<String>,
) -> Result<Connection<String, L::Node>> {
    let request = PageRequest::new(first, after, app(ctx).config.graphql.max_page_size)?;
    if request.after.is_some() {
        return page::<L>(ctx, &L::of_endpoint(endpoint), request).await;
    }
    let rows = L::first_pages(ctx.data_unchecked::<Loaders>())
        .load_one((endpoint.clone(), request.fetch_limit()))
        .await?
        .unwrap_or_default();
    Ok(request.connection(rows, L::position, L::node))
}
