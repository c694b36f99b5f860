//! The query root.

use async_graphql::connection::Connection;
use async_graphql::{Context, InputObject, Object, ID};

use super::access::ApiKey;
use super::error::Result;
use super::listing;
use super::loaders::Loaders;
use super::pagination::PageRequest;
use super::types::{
    Delivery, DeliveryActivityMinute, DeliveryCounts, DeliveryState, Endpoint, Submission,
    Timestamp,
};
use super::visibility::{self, sees_endpoint, view};
use super::{app, database, scope, time_range};
use crate::auth::AuthenticatedKey;
use crate::db;
use crate::db::deliveries::DeliveryFilter as DeliveryQuery;
use crate::db::submissions::SubmissionFilter as SubmissionQuery;
use crate::error::ApiError;
use crate::model::ids::{DeliveryId, DestinationId, EndpointId, SubmissionId};
use crate::model::search::{FieldValue, SearchError, SearchWords};
use crate::model::spam::SubmissionFolder;
use chrono::{DurationRound, TimeDelta};

/// Exclusive bounds on `receivedAt`, and the folder (the inbox unless set).
#[derive(InputObject, Default)]
#[graphql(name = "SubmissionFilter")]
pub struct SubmissionFilterInput {
    pub endpoint_id: Option<ID>,
    /// `INBOX` (the default), `SPAM` or `ALL`.
    pub folder: Option<SubmissionFolder>,
    pub received_after: Option<Timestamp>,
    pub received_before: Option<Timestamp>,
    /// Words its values hold, every one (1–200 characters, web search syntax:
    /// `"a phrase"`, `-excluded`, `or`; words as written, letter case aside; at least one
    /// word not excluded).
    pub search: Option<String>,
    /// A value one of its fields holds whole, letter case and surrounding spaces aside
    /// (1–200 characters): one person's submissions by their email address, say.
    pub value: Option<String>,
}

/// Exclusive bounds on `createdAt`.
#[derive(InputObject, Default)]
#[graphql(name = "DeliveryFilter")]
pub struct DeliveryFilterInput {
    pub endpoint_id: Option<ID>,
    /// Only this destination's deliveries.
    pub destination_id: Option<ID>,
    pub state: Option<DeliveryState>,
    pub created_after: Option<Timestamp>,
    pub created_before: Option<Timestamp>,
}

#[derive(Default)]
pub struct QueryRoot;

#[Object]
impl QueryRoot {
    /// The version of the running service.
    async fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }

    /// The management key this operation was authenticated with: a dashboard learns its
    /// role here and offers only what the role allows.
    async fn api_key(&self, ctx: &Context<'_>) -> Result<ApiKey> {
        let id = &ctx.data_unchecked::<AuthenticatedKey>().id;
        // From the primary, where the key was just checked: a replica may not have a key
        // made a moment ago.
        let row = app(ctx)
            .graphql_db
            .run(async |conn| db::keys::find(conn, id).await)
            .await?
            .ok_or_else(|| ApiError::InvalidApiKey)?;
        Ok(ApiKey(row))
    }

    async fn endpoint(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Endpoint>> {
        let Some(id) = EndpointId::parse(&id) else {
            return Ok(None);
        };
        Endpoint::load(ctx, &id).await
    }

    /// Every endpoint, newest first; those deleted with their history kept only with
    /// `includeDeleted: true` (`endpoint(id)` finds them either way).
    #[graphql(complexity = "super::pagination::page_complexity(first, child_complexity)")]
    async fn endpoints(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        include_deleted: Option<bool>,
    ) -> Result<Connection<String, Endpoint>> {
        let include_deleted = include_deleted.unwrap_or(false);
        let app = app(ctx);
        let page = PageRequest::new(first, after, app.config.graphql.max_page_size)?;
        let after = page.after.clone();
        let project = view(ctx);
        let rows = database(ctx)
            .run(async |conn| {
                db::endpoints::page(conn, project, after, page.fetch_limit(), include_deleted).await
            })
            .await?;
        Ok(page.connection(
            rows,
            |row| (row.created_at, row.id.to_string()),
            Endpoint::new,
        ))
    }

    /// The only place submitted field values are returned.
    async fn submission(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Submission>> {
        let Some(id) = SubmissionId::parse(&id) else {
            return Ok(None);
        };
        let loaders = ctx.data_unchecked::<Loaders>();
        let Some(row) = loaders.submissions.load_one(id).await? else {
            return Ok(None);
        };
        Ok(sees_endpoint(ctx, &row.endpoint_id)
            .await?
            .then_some(Submission(row)))
    }

    /// One person's data: every submission, in any folder of any endpoint, with a field
    /// holding `value` whole (as the `value` filter finds them), newest first, with what
    /// each carries (`fields`, `files` and their links, `deliveries` and their attempts),
    /// in one answer: what a request for a person's data (GDPR article 15) is answered
    /// with. At most 10,000: a value more hold is `INVALID_INPUT`, a common value, not one
    /// person's. `erasePersonData` erases the same submissions.
    async fn person_data(&self, ctx: &Context<'_>, value: String) -> Result<Vec<Submission>> {
        let refused = |error| ApiError::search_refused("value", error);
        let value = FieldValue::parse(&value).map_err(refused)?;
        let rows = database(ctx)
            .run(async |conn| db::submissions::holding(conn, &value, view(ctx)).await)
            .await?
            .ok_or_else(|| refused(SearchError::HeldByTooMany))?;
        // A person's data taken out is on record (which submissions, never the value).
        if !rows.is_empty() {
            let app = app(ctx);
            let read = crate::audit::Read {
                key: visibility::key(ctx),
                address: &ctx.data_unchecked::<super::ClientAddress>().0,
                operation: "personData",
                targets: rows.iter().map(|row| row.id.to_string()).collect(),
                arguments: serde_json::json!({ "value": "[redacted]" }),
                project: view(ctx).cloned(),
                at: app.clock.now(),
            };
            app.audit.record_read(read).await?;
        }
        Ok(rows.into_iter().map(Submission).collect())
    }

    /// Submissions, newest first.
    #[graphql(complexity = "super::pagination::page_complexity(first, child_complexity)")]
    async fn submissions(
        &self,
        ctx: &Context<'_>,
        filter: Option<SubmissionFilterInput>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, Submission>> {
        let filter = filter.unwrap_or_default();
        let (received_after, received_before) =
            time_range(filter.received_after, filter.received_before)?;
        let page = PageRequest::new(first, after, app(ctx).config.graphql.max_page_size)?;
        let refused =
            |field: &str, error| ApiError::search_refused(&format!("filter.{field}"), error);
        let search = filter
            .search
            .as_deref()
            .map(|raw| SearchWords::parse(raw).map_err(|e| refused("search", e)))
            .transpose()?;
        let value = filter
            .value
            .as_deref()
            .map(|raw| FieldValue::parse(raw).map_err(|e| refused("value", e)))
            .transpose()?;
        let Some(endpoint_id) = scope(filter.endpoint_id.as_ref(), EndpointId::parse) else {
            return Ok(page.empty());
        };
        let query = SubmissionQuery {
            project: view(ctx).cloned(),
            endpoint_id,
            folder: filter.folder.unwrap_or_default(),
            received_after,
            received_before,
            search,
            value,
        };
        listing::page::<super::types::Submissions>(ctx, &query, page).await
    }

    async fn delivery(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Delivery>> {
        let Some(id) = DeliveryId::parse(&id) else {
            return Ok(None);
        };
        let ids = [id];
        let rows = database(ctx)
            .run(async |conn| db::deliveries::find_many(conn, &ids).await)
            .await?;
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        Ok(sees_endpoint(ctx, &row.endpoint_id)
            .await?
            .then_some(Delivery(row)))
    }

    /// Deliveries, newest first.
    #[graphql(complexity = "super::pagination::page_complexity(first, child_complexity)")]
    async fn deliveries(
        &self,
        ctx: &Context<'_>,
        filter: Option<DeliveryFilterInput>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, Delivery>> {
        let filter = filter.unwrap_or_default();
        let (created_after, created_before) =
            time_range(filter.created_after, filter.created_before)?;
        let page = PageRequest::new(first, after, app(ctx).config.graphql.max_page_size)?;
        let Some(endpoint_id) = scope(filter.endpoint_id.as_ref(), EndpointId::parse) else {
            return Ok(page.empty());
        };
        let Some(destination_id) = scope(filter.destination_id.as_ref(), DestinationId::parse)
        else {
            return Ok(page.empty());
        };
        let query = DeliveryQuery {
            project: view(ctx).cloned(),
            endpoint_id,
            destination_id,
            state: filter.state,
            created_after,
            created_before,
        };
        listing::page::<super::types::Deliveries>(ctx, &query, page).await
    }

    /// How many deliveries are in each state, for one endpoint or all.
    async fn delivery_counts(
        &self,
        ctx: &Context<'_>,
        endpoint_id: Option<ID>,
    ) -> Result<DeliveryCounts> {
        let Some(endpoint_id) = scope(endpoint_id.as_ref(), EndpointId::parse) else {
            return Ok(DeliveryCounts(Default::default()));
        };
        let counts = database(ctx)
            .run(async |conn| {
                db::deliveries::count_by_state(conn, endpoint_id.as_ref(), view(ctx)).await
            })
            .await?;
        Ok(DeliveryCounts(counts))
    }

    /// Deliveries that ended in each of the last `minutes` minutes (1–60; left out or
    /// `null`: 60), one entry per minute, oldest first and the current minute last: how
    /// many were delivered and how many failed. Counted from the delivery events, so it reaches back as far as their
    /// retention (at least an hour).
    #[graphql(
        complexity = "(minutes.unwrap_or(MAX_ACTIVITY_MINUTES).max(0) as usize).saturating_mul(child_complexity) + 1"
    )]
    async fn delivery_activity(
        &self,
        ctx: &Context<'_>,
        endpoint_id: Option<ID>,
        minutes: Option<i32>,
    ) -> Result<Vec<DeliveryActivityMinute>> {
        let minutes = minutes.unwrap_or(MAX_ACTIVITY_MINUTES);
        if !(1..=MAX_ACTIVITY_MINUTES).contains(&minutes) {
            return Err(ApiError::InvalidInput {
                field: "minutes".into(),
                reason: format!("must be between 1 and {MAX_ACTIVITY_MINUTES}"),
            }
            .into());
        }
        let now = app(ctx).clock.now();
        let current = now
            .duration_trunc(TimeDelta::minutes(1))
            .map_err(|_| ApiError::Internal("the clock is out of range".into()))?;
        let first = current - TimeDelta::minutes(i64::from(minutes - 1));
        let ended = match scope(endpoint_id.as_ref(), EndpointId::parse) {
            None => Vec::new(),
            Some(endpoint_id) => {
                database(ctx)
                    .run(async |conn| {
                        db::deliveries::activity_by_minute(
                            conn,
                            endpoint_id.as_ref(),
                            view(ctx),
                            first,
                        )
                        .await
                    })
                    .await?
            }
        };
        Ok((0..minutes)
            .map(|offset| {
                let minute = first + TimeDelta::minutes(i64::from(offset));
                let (delivered, failed) = ended
                    .iter()
                    .find(|(at, _, _)| *at == minute)
                    .map_or((0, 0), |(_, delivered, failed)| (*delivered, *failed));
                DeliveryActivityMinute {
                    minute: Timestamp(minute),
                    delivered,
                    failed,
                }
            })
            .collect())
    }
}

/// An hour: what the console's chart shows, and what the event retention always covers.
const MAX_ACTIVITY_MINUTES: i32 = 60;
