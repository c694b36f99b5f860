//! The mutation root: endpoints, secrets, replays, erasure.

use async_graphql::{Context, InputObject, MaybeUndefined, Object, Result, ID};
use url::Url;

use super::types::{
    DeleteSubmissionPayload, Delivery, Endpoint, EndpointSecretPayload, ReplayDeliveriesPayload,
    ReplayDeliveryPayload, Timestamp,
};
use super::{app, time_range, ResultExt};
use crate::db;
use crate::db::deliveries::{ReplayFilter as ReplayQuery, ReplayOutcome};
use crate::db::endpoints::EndpointRow;
use crate::db::submissions::EraseOutcome;
use crate::delivery::destination::validate_webhook_url;
use crate::error::ApiError;
use crate::ids;

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

/// Which failed deliveries to replay: exclusive bounds on when they failed.
#[derive(InputObject)]
pub struct ReplayFilter {
    pub endpoint_id: Option<ID>,
    pub failed_after: Option<Timestamp>,
    pub failed_before: Option<Timestamp>,
}

fn invalid(field: &str, reason: &str) -> ApiError {
    ApiError::InvalidInput {
        field: field.into(),
        reason: reason.into(),
    }
}

fn valid_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(invalid("name", "must be 1 to 200 characters"));
    }
    Ok(name.to_string())
}

fn valid_webhook_url(url: &str, allow_private: bool) -> Result<String, ApiError> {
    validate_webhook_url(url, allow_private)
        .map(|_| url.trim().to_string())
        .map_err(|error| ApiError::InvalidWebhookUrl {
            field: "webhookUrl".into(),
            reason: error.to_string(),
        })
}

fn valid_redirect_url(url: &str) -> Result<String, ApiError> {
    let parsed = Url::parse(url.trim())
        .map_err(|_| invalid("redirectUrl", "must be an absolute http or https URL"))?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host().is_none()
        || !crate::delivery::destination::written_with_authority(url.trim())
    {
        return Err(invalid(
            "redirectUrl",
            "must be an absolute http or https URL",
        ));
    }
    if url.chars().count() > 2048 {
        return Err(invalid("redirectUrl", "must be at most 2048 characters"));
    }
    Ok(url.trim().to_string())
}

/// Origins as browsers send them: `scheme://host[:port]`, stored in that form, deduplicated.
fn valid_origins(origins: &[String]) -> Result<Vec<Option<String>>, ApiError> {
    const MAX_ORIGINS: usize = 100;
    if origins.len() > MAX_ORIGINS {
        return Err(invalid("allowedOrigins", "at most 100 origins"));
    }
    let mut valid: Vec<Option<String>> = Vec::new();
    for origin in origins {
        let parsed = Url::parse(origin.trim())
            .map_err(|_| invalid("allowedOrigins", "each origin must be scheme://host[:port]"))?;
        let serialised = parsed.origin().ascii_serialization();
        let bare = parsed.path() == "/"
            && parsed.query().is_none()
            && parsed.fragment().is_none()
            && parsed.username().is_empty();
        if !matches!(parsed.scheme(), "http" | "https") || !bare || serialised == "null" {
            return Err(invalid(
                "allowedOrigins",
                "each origin must be scheme://host[:port]",
            ));
        }
        if !valid.contains(&Some(serialised.clone())) {
            valid.push(Some(serialised));
        }
    }
    Ok(valid)
}

fn valid_honeypot(name: &str, max_length: usize) -> Result<String, ApiError> {
    let bad = name.is_empty()
        || name.chars().count() > max_length
        || name
            .chars()
            .any(|c| matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'));
    if bad {
        return Err(invalid("honeypotField", "must be a valid field name"));
    }
    Ok(name.to_string())
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
        if !ids::is_valid_endpoint_id(&input.id) {
            return Err(ApiError::InvalidEndpointId).gql();
        }
        let name = valid_name(&input.name).gql()?;
        let webhook_url = input
            .webhook_url
            .as_deref()
            .map(|url| valid_webhook_url(url, config.webhook.allow_private_targets))
            .transpose()
            .gql()?;
        let webhook_secret = webhook_url
            .as_ref()
            .map(|_| crate::delivery::payload::new_secret());
        let endpoint = EndpointRow {
            id: input.id.0.clone(),
            name,
            is_active: input.is_active.unwrap_or(true),
            created_at: app.clock.now(),
            webhook_url,
            webhook_secret: webhook_secret.clone(),
            redirect_url: input
                .redirect_url
                .as_deref()
                .map(valid_redirect_url)
                .transpose()
                .gql()?,
            allowed_origins: valid_origins(input.allowed_origins.as_deref().unwrap_or_default())
                .gql()?,
            honeypot_field: input
                .honeypot_field
                .as_deref()
                .map(|name| valid_honeypot(name, config.intake.max_field_name_length))
                .transpose()
                .gql()?,
        };
        let inserted = app
            .db
            .run(async |conn| {
                // A duplicate id is an answer, not a failure of the call.
                match db::endpoints::insert(conn, &endpoint).await {
                    Ok(()) => db::endpoints::find(conn, &endpoint.id).await.map(Ok),
                    Err(error) if db::endpoints::is_duplicate_id(&error) => Ok(Err(())),
                    Err(error) => Err(error),
                }
            })
            .await
            .gql()?;
        let row = match inserted {
            Ok(row) => row
                .ok_or_else(|| ApiError::Internal("a created endpoint vanished".into()))
                .gql()?,
            Err(()) => {
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
        let name = input.name.as_deref().map(valid_name).transpose().gql()?;
        let redirect_url = match &input.redirect_url {
            MaybeUndefined::Value(url) => MaybeUndefined::Value(valid_redirect_url(url).gql()?),
            MaybeUndefined::Null => MaybeUndefined::Null,
            MaybeUndefined::Undefined => MaybeUndefined::Undefined,
        };
        let allowed_origins = match &input.allowed_origins {
            MaybeUndefined::Value(origins) => Some(valid_origins(origins).gql()?),
            MaybeUndefined::Null => Some(Vec::new()),
            MaybeUndefined::Undefined => None,
        };
        let honeypot_field = match &input.honeypot_field {
            MaybeUndefined::Value(field) => MaybeUndefined::Value(
                valid_honeypot(field, config.intake.max_field_name_length).gql()?,
            ),
            MaybeUndefined::Null => MaybeUndefined::Null,
            MaybeUndefined::Undefined => MaybeUndefined::Undefined,
        };
        let webhook_url = input.webhook_url.clone();
        let allow_private = config.webhook.allow_private_targets;
        let candidate_secret = crate::delivery::payload::new_secret();
        let secret_for_change = candidate_secret.clone();
        let is_active = input.is_active;
        let id = input.id.0.clone();
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
                                next.webhook_url = Some(valid_webhook_url(&url, allow_private)?);
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
        let secret = crate::delivery::payload::new_secret();
        let new_secret = secret.clone();
        let id = endpoint_id.0.clone();
        let target = endpoint_id.0.clone();
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
        match app
            .db
            .run(async |conn| db::deliveries::replay(conn, &id, now).await)
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
                submission_erased,
            })
            .gql(),
        }
    }

    /// Replays every failed delivery matching the filter, in one statement.
    async fn replay_deliveries(
        &self,
        ctx: &Context<'_>,
        filter: ReplayFilter,
    ) -> Result<ReplayDeliveriesPayload> {
        let app = app(ctx);
        let (failed_after, failed_before) = time_range(filter.failed_after, filter.failed_before)?;
        let query = ReplayQuery {
            endpoint_id: filter.endpoint_id.map(|id| id.0),
            failed_after,
            failed_before,
        };
        let now = app.clock.pinned();
        let count = app
            .db
            .run(async |conn| db::deliveries::replay_matching(conn, &query, now).await)
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
        match app
            .db
            .run(async |conn| db::submissions::erase(conn, &id).await)
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
