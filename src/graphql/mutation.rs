//! The mutation root: endpoints, secrets, replays, erasure. The rules of endpoint settings
//! are the domain's (`model::endpoint`); this maps their failures to the API's errors.

use async_graphql::{Context, InputObject, MaybeUndefined, Object, Result, ID};

use super::types::{
    DeleteSubmissionPayload, Delivery, Endpoint, EndpointSecretPayload, ReplayDeliveriesPayload,
    ReplayDeliveryPayload, Timestamp,
};
use super::{app, scope, time_range, ResultExt};
use crate::db;
use crate::db::deliveries::{ReplayFilter as ReplayQuery, ReplayOutcome};
use crate::db::models::EndpointRow;
use crate::db::submissions::EraseOutcome;
use crate::error::{ApiError, NotReplayable};
use crate::model::endpoint::{self as rules, SettingError};
use crate::model::ids::{DeliveryId, EndpointId, SubmissionId};

#[derive(InputObject)]
pub struct CreateEndpointInput {
    pub id: ID,
    pub name: String,
    /// Defaults to true; `null` counts as left out.
    #[graphql(default_with = "Some(true)")]
    pub is_active: Option<bool>,
    pub webhook_url: Option<String>,
    pub redirect_url: Option<String>,
    pub allowed_origins: Option<Vec<String>>,
    pub honeypot_field: Option<String>,
}

/// A field left out is unchanged; `null` removes it (`webhookUrl: null` removes the webhook
/// and its secret).
#[derive(InputObject)]
pub struct UpdateEndpointInput {
    pub id: ID,
    pub name: Option<String>,
    pub is_active: Option<bool>,
    pub webhook_url: MaybeUndefined<String>,
    pub redirect_url: MaybeUndefined<String>,
    pub allowed_origins: MaybeUndefined<Vec<String>>,
    pub honeypot_field: MaybeUndefined<String>,
}

/// Which failed deliveries to replay: exclusive bounds on when they failed and on when
/// they were created.
#[derive(InputObject)]
pub struct ReplayFilter {
    pub endpoint_id: Option<ID>,
    pub failed_after: Option<Timestamp>,
    pub failed_before: Option<Timestamp>,
    pub created_after: Option<Timestamp>,
    pub created_before: Option<Timestamp>,
}

/// The API's error for a setting that breaks its rule, naming the input field.
fn refused(error: SettingError) -> ApiError {
    use rules::Setting;
    match error {
        SettingError::WebhookUrl(reason) => ApiError::InvalidWebhookUrl {
            field: "webhookUrl".into(),
            reason: reason.to_string(),
        },
        SettingError::Invalid { setting, reason } => ApiError::InvalidInput {
            field: match setting {
                Setting::Name => "name",
                Setting::RedirectUrl => "redirectUrl",
                Setting::AllowedOrigins => "allowedOrigins",
                Setting::HoneypotField => "honeypotField",
            }
            .into(),
            reason: reason.into(),
        },
    }
}

/// Origins as the row stores them (a `text[]` column).
fn stored_origins(origins: Vec<String>) -> Vec<Option<String>> {
    origins.into_iter().map(Some).collect()
}

pub struct MutationRoot;

#[Object(name = "Mutation")]
impl MutationRoot {
    /// Creates an endpoint. A webhook URL gets a new signing secret, returned here only.
    async fn create_endpoint(
        &self,
        ctx: &Context<'_>,
        input: CreateEndpointInput,
    ) -> Result<EndpointSecretPayload> {
        let app = app(ctx);
        let config = &app.config;
        let Some(id) = EndpointId::parse(&input.id) else {
            return Err(ApiError::InvalidEndpointId).gql();
        };
        let name = rules::name(&input.name).map_err(refused).gql()?;
        let webhook_url = input
            .webhook_url
            .as_deref()
            .map(|url| rules::webhook_url(url, config.webhook.allow_private_targets))
            .transpose()
            .map_err(refused)
            .gql()?;
        let webhook_secret = webhook_url.as_ref().map(|_| rules::new_secret());
        let endpoint = EndpointRow {
            id,
            name,
            is_active: input.is_active.unwrap_or(true),
            created_at: app.clock.now(),
            webhook_url,
            webhook_secret: webhook_secret.clone(),
            redirect_url: input
                .redirect_url
                .as_deref()
                .map(rules::redirect_url)
                .transpose()
                .map_err(refused)
                .gql()?,
            allowed_origins: stored_origins(
                rules::allowed_origins(input.allowed_origins.as_deref().unwrap_or_default())
                    .map_err(refused)
                    .gql()?,
            ),
            honeypot_field: input
                .honeypot_field
                .as_deref()
                .map(|name| rules::honeypot_field(name, config.intake.max_field_name_length))
                .transpose()
                .map_err(refused)
                .gql()?,
        };
        let inserted = app
            .db
            .run(async |conn| {
                // A taken id is an answer, not a failure of the call.
                if !db::endpoints::insert(conn, &endpoint).await? {
                    return Ok(None);
                }
                db::endpoints::find(conn, &endpoint.id).await.map(Some)
            })
            .await
            .gql()?;
        // This process's intake sees the new endpoint at once; others on notification.
        app.endpoints.invalidate(&input.id);
        let row = match inserted {
            Some(row) => row
                .ok_or_else(|| ApiError::Internal("a created endpoint vanished".into()))
                .gql()?,
            None => {
                return Err(ApiError::EndpointAlreadyExists {
                    endpoint_id: input.id.0,
                })
                .gql()
            }
        };
        Ok(EndpointSecretPayload {
            endpoint: Endpoint(row),
            webhook_secret,
        })
    }

    /// Changes an endpoint. Left out: unchanged; `webhookUrl: null`: webhook and secret
    /// removed; the same URL: nothing changes; a different URL: validated, new secret.
    /// Queued deliveries keep the URL and secret they were accepted with.
    async fn update_endpoint(
        &self,
        ctx: &Context<'_>,
        input: UpdateEndpointInput,
    ) -> Result<EndpointSecretPayload> {
        let app = app(ctx);
        let config = &app.config;
        let Some(id) = EndpointId::parse(&input.id) else {
            return Err(ApiError::EndpointNotFound {
                endpoint_id: input.id.0,
            })
            .gql();
        };
        let name = input
            .name
            .as_deref()
            .map(rules::name)
            .transpose()
            .map_err(refused)
            .gql()?;
        let redirect_url = match &input.redirect_url {
            MaybeUndefined::Value(url) => {
                MaybeUndefined::Value(rules::redirect_url(url).map_err(refused).gql()?)
            }
            MaybeUndefined::Null => MaybeUndefined::Null,
            MaybeUndefined::Undefined => MaybeUndefined::Undefined,
        };
        let allowed_origins = match &input.allowed_origins {
            MaybeUndefined::Value(origins) => Some(stored_origins(
                rules::allowed_origins(origins).map_err(refused).gql()?,
            )),
            MaybeUndefined::Null => Some(Vec::new()),
            MaybeUndefined::Undefined => None,
        };
        let honeypot_field = match &input.honeypot_field {
            MaybeUndefined::Value(field) => MaybeUndefined::Value(
                rules::honeypot_field(field, config.intake.max_field_name_length)
                    .map_err(refused)
                    .gql()?,
            ),
            MaybeUndefined::Null => MaybeUndefined::Null,
            MaybeUndefined::Undefined => MaybeUndefined::Undefined,
        };
        let webhook_url = input.webhook_url.clone();
        let allow_private = config.webhook.allow_private_targets;
        let candidate_secret = rules::new_secret();
        let secret_for_change = candidate_secret.clone();
        let is_active = input.is_active;
        let updated = app
            .db
            .run(async move |conn| {
                Ok(
                    db::endpoints::update_with::<ApiError, _>(conn, &id, move |current| {
                        let mut next = current;
                        if let Some(name) = name {
                            next.name = name;
                        }
                        if let Some(is_active) = is_active {
                            next.is_active = is_active;
                        }
                        match webhook_url {
                            MaybeUndefined::Undefined => {}
                            MaybeUndefined::Null => {
                                next.webhook_url = None;
                                next.webhook_secret = None;
                            }
                            MaybeUndefined::Value(url)
                                if Some(url.trim()) == next.webhook_url.as_deref() => {}
                            MaybeUndefined::Value(url) => {
                                next.webhook_url =
                                    Some(rules::webhook_url(&url, allow_private).map_err(refused)?);
                                next.webhook_secret = Some(secret_for_change);
                            }
                        }
                        match redirect_url {
                            MaybeUndefined::Undefined => {}
                            MaybeUndefined::Null => next.redirect_url = None,
                            MaybeUndefined::Value(url) => next.redirect_url = Some(url),
                        }
                        if let Some(origins) = allowed_origins {
                            next.allowed_origins = origins;
                        }
                        match honeypot_field {
                            MaybeUndefined::Undefined => {}
                            MaybeUndefined::Null => next.honeypot_field = None,
                            MaybeUndefined::Value(field) => next.honeypot_field = Some(field),
                        }
                        Ok(next)
                    })
                    .await,
                )
            })
            .await
            .gql()?
            .gql()?;
        app.endpoints.invalidate(&input.id);
        let row = updated
            .ok_or(ApiError::EndpointNotFound {
                endpoint_id: input.id.0,
            })
            .gql()?;
        let made = row.webhook_secret.as_deref() == Some(candidate_secret.as_str());
        Ok(EndpointSecretPayload {
            endpoint: Endpoint(row),
            webhook_secret: made.then_some(candidate_secret),
        })
    }

    /// A new signing secret for the same URL; queued deliveries keep the old one.
    async fn rotate_webhook_secret(
        &self,
        ctx: &Context<'_>,
        endpoint_id: ID,
    ) -> Result<EndpointSecretPayload> {
        let app = app(ctx);
        let Some(target) = EndpointId::parse(&endpoint_id) else {
            return Err(ApiError::EndpointNotFound {
                endpoint_id: endpoint_id.0,
            })
            .gql();
        };
        let secret = rules::new_secret();
        let new_secret = secret.clone();
        let id = endpoint_id.0.clone();
        let updated = app
            .db
            .run(async move |conn| {
                Ok(
                    db::endpoints::update_with::<ApiError, _>(conn, &target, move |current| {
                        if current.webhook_url.is_none() {
                            return Err(ApiError::EndpointHasNoWebhook { endpoint_id: id });
                        }
                        let mut next = current;
                        next.webhook_secret = Some(new_secret);
                        Ok(next)
                    })
                    .await,
                )
            })
            .await
            .gql()?
            .gql()?;
        app.endpoints.invalidate(&endpoint_id);
        let row = updated
            .ok_or(ApiError::EndpointNotFound {
                endpoint_id: endpoint_id.0,
            })
            .gql()?;
        Ok(EndpointSecretPayload {
            endpoint: Endpoint(row),
            webhook_secret: Some(secret),
        })
    }

    /// Puts a failed delivery back in the queue with a fresh retry cycle.
    async fn replay_delivery(&self, ctx: &Context<'_>, id: ID) -> Result<ReplayDeliveryPayload> {
        let app = app(ctx);
        let now = app.clock.pinned();
        let Some(delivery) = DeliveryId::parse(&id) else {
            return Err(ApiError::DeliveryNotFound { delivery_id: id.0 }).gql();
        };
        match app
            .db
            .run(async |conn| db::deliveries::replay(conn, &delivery, now).await)
            .await
            .gql()?
        {
            ReplayOutcome::Replayed(row) => Ok(ReplayDeliveryPayload {
                delivery: Delivery(row),
            }),
            ReplayOutcome::NotFound => Err(ApiError::DeliveryNotFound { delivery_id: id.0 }).gql(),
            ReplayOutcome::NotReplayable {
                state,
                submission_erased,
            } => Err(ApiError::DeliveryNotReplayable {
                delivery_id: id.0,
                state,
                reason: submission_erased.then_some(NotReplayable::SubmissionErased),
            })
            .gql(),
        }
    }

    /// Replays every failed delivery matching the filter, in one statement. With `dryRun`
    /// (`true`; left out or `null`: `false`) nothing changes and `count` says how many it
    /// would replay now, to confirm first.
    async fn replay_deliveries(
        &self,
        ctx: &Context<'_>,
        filter: ReplayFilter,
        dry_run: Option<bool>,
    ) -> Result<ReplayDeliveriesPayload> {
        let app = app(ctx);
        let (failed_after, failed_before) = time_range(filter.failed_after, filter.failed_before)?;
        let (created_after, created_before) =
            time_range(filter.created_after, filter.created_before)?;
        let Some(endpoint_id) = scope(filter.endpoint_id.as_ref(), EndpointId::parse) else {
            return Ok(ReplayDeliveriesPayload { count: 0 });
        };
        let query = ReplayQuery {
            endpoint_id,
            failed_after,
            failed_before,
            created_after,
            created_before,
        };
        let now = app.clock.pinned();
        let count = app
            .db
            .run(async |conn| {
                if dry_run == Some(true) {
                    db::deliveries::count_replayable(conn, &query).await
                } else {
                    db::deliveries::replay_matching(conn, &query, now).await
                }
            })
            .await
            .gql()?;
        Ok(ReplayDeliveriesPayload {
            count: i32::try_from(count).unwrap_or(i32::MAX),
        })
    }

    /// Erases a submission's values (a GDPR request) unless its delivery is still owed.
    /// Its delivery and attempt history stay, without the submission.
    async fn delete_submission(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> Result<DeleteSubmissionPayload> {
        let app = app(ctx);
        let Some(submission) = SubmissionId::parse(&id) else {
            return Err(ApiError::SubmissionNotFound {
                submission_id: id.0,
            })
            .gql();
        };
        match app
            .db
            .run(async |conn| db::submissions::erase(conn, &submission).await)
            .await
            .gql()?
        {
            EraseOutcome::Erased => Ok(DeleteSubmissionPayload {
                deleted_submission_id: id,
            }),
            EraseOutcome::NotFound => Err(ApiError::SubmissionNotFound {
                submission_id: id.0,
            })
            .gql(),
            EraseOutcome::DeliveryInProgress { state } => {
                Err(ApiError::SubmissionDeliveryInProgress {
                    submission_id: id.0,
                    state,
                })
                .gql()
            }
        }
    }
}
