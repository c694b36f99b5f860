//! The two newest-first listings, submissions and deliveries, paged one way: on their own
//! (`Query.submissions`, `Query.deliveries`, filtered) and below an endpoint
//! (`Endpoint.submissions`, `Endpoint.deliveries`), whose first pages for every endpoint
//! of a response load together in one statement.

use std::future::Future;

use async_graphql::connection::Connection;
use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};
use async_graphql::{Context, Lookahead, OutputType, Result};
use diesel_async::AsyncPgConnection;

use super::loaders::{prime_deliveries, prime_submissions, FirstPage, LoadError, Loaders};
use super::pagination::{PageRequest, Position};
use super::types::{Delivery, Submission};
use super::{app, database, ResultExt};
use crate::db;
use crate::db::deliveries::DeliveryFilter;
use crate::db::models::{DeliveryRow, SubmissionRow};
use crate::db::submissions::SubmissionFilter;
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

pub struct Submissions;
pub struct Deliveries;

impl Listing for Submissions {
    type Row = SubmissionRow;
    type Node = Submission;
    type Filter = SubmissionFilter;
    type FirstPages = super::loaders::EndpointSubmissionsLoader;

    fn of_endpoint(endpoint: &EndpointId) -> SubmissionFilter {
        SubmissionFilter {
            endpoint_id: Some(endpoint.clone()),
            ..SubmissionFilter::default()
        }
    }
    fn first_pages(loaders: &Loaders) -> &DataLoader<Self::FirstPages, HashMapCache> {
        &loaders.endpoint_submissions
    }
    fn page<'a>(
        conn: &'a mut AsyncPgConnection,
        filter: &'a SubmissionFilter,
        after: Option<Position>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<SubmissionRow>, DbError>> + Send + 'a {
        db::submissions::page(conn, filter, after, limit)
    }
    fn prime<'a>(
        ctx: &'a Context<'_>,
        node: Lookahead<'a>,
        rows: &'a [SubmissionRow],
    ) -> impl Future<Output = Result<(), LoadError>> + 'a {
        prime_submissions(ctx, node, rows)
    }
    fn position(row: &SubmissionRow) -> Position {
        (row.received_at, row.id.to_string())
    }
    fn node(row: SubmissionRow) -> Submission {
        Submission(row)
    }
}

impl Listing for Deliveries {
    type Row = DeliveryRow;
    type Node = Delivery;
    type Filter = DeliveryFilter;
    type FirstPages = super::loaders::EndpointDeliveriesLoader;

    fn of_endpoint(endpoint: &EndpointId) -> DeliveryFilter {
        DeliveryFilter {
            endpoint_id: Some(endpoint.clone()),
            ..DeliveryFilter::default()
        }
    }
    fn first_pages(loaders: &Loaders) -> &DataLoader<Self::FirstPages, HashMapCache> {
        &loaders.endpoint_deliveries
    }
    fn page<'a>(
        conn: &'a mut AsyncPgConnection,
        filter: &'a DeliveryFilter,
        after: Option<Position>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<DeliveryRow>, DbError>> + Send + 'a {
        db::deliveries::page(conn, filter, after, limit)
    }
    fn prime<'a>(
        ctx: &'a Context<'_>,
        node: Lookahead<'a>,
        rows: &'a [DeliveryRow],
    ) -> impl Future<Output = Result<(), LoadError>> + 'a {
        prime_deliveries(ctx, node, rows)
    }
    fn position(row: &DeliveryRow) -> Position {
        (row.created_at, row.id.to_string())
    }
    fn node(row: DeliveryRow) -> Delivery {
        Delivery(row)
    }
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
        .await
        .gql()?;
    L::prime(ctx, ctx.look_ahead().field("edges").field("node"), &rows)
        .await
        .gql()?;
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
        .await
        .gql()?
        .unwrap_or_default();
    Ok(request.connection(rows, L::position, L::node))
}
