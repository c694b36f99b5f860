//! The mutation root: endpoints, secrets, replays, erasure. The rules of endpoint settings
//! are the domain's (`model::endpoint`); this maps their failures to the API's errors.

use async_graphql::{Context, InputObject, MaybeUndefined, Object, ID};

use super::audit::{audited, Audited};
use super::destination_mutation::{answered, rotation};
use super::error::{ResolverError, Result};
use super::ids::endpoint_or_not_found;
use super::types::{
    DeleteEndpointPayload, DeleteSubmissionPayload, Delivery, Endpoint, EndpointHistory,
    EndpointPayload, EndpointSecretPayload, ErasePersonDataPayload, ReplayDeliveriesPayload,
    ReplayDeliveryPayload, ResumeEndpointPayload, Timestamp,
};
use super::visibility::view;
use super::{app, database, patch, scope, time_range};
use crate::db;
use crate::db::deliveries::{ReplayFilter as ReplayQuery, ReplayOutcome, ReplayTarget};
use crate::db::destinations::{Switch, Switched};
use crate::db::endpoints::DeleteOutcome;
use crate::db::models::{DestinationRow, EndpointRow};
use crate::db::projects::Owned;
use crate::db::submissions::{EraseOutcome, PersonErasure};
use crate::delivery::pausing;
use crate::error::{ApiError, NotReplayable};
use crate::model::endpoint::{self as rules, Setting};
use crate::model::ids::{DeliveryId, DestinationId, EndpointId, ProjectId, SubmissionId};
use crate::model::search::{FieldValue, SearchError};
use crate::model::state::{DeliveryState, PauseReason};

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
    /// File uploads on, with these settings (left out or `null`: off).
    pub file_uploads: Option<super::files::FileUploadsInput>,
    /// Days its submissions are kept, 0 (for ever) to 1000000; left out or `null`: the
    /// server's (`FORMS_SUBMISSION_RETENTION_DAYS`).
    pub retention_days: Option<i32>,
    /// Days its spam is kept, 0 (for ever) to 1000000; left out or `null`: the server's
    /// (`FORMS_SPAM_RETENTION_DAYS`).
    pub spam_retention_days: Option<i32>,
    /// The project it belongs to, for ever. Left out or `null`: the key's project, or for
    /// a key of every project the one its `Hymical-Project` header names, else the
    /// default project. Another project than the key's: `PROJECT_NOT_FOUND`.
    pub project_id: Option<ID>,
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
    /// File uploads on with these settings (replacing the previous ones whole); `null`:
    /// off.
    pub file_uploads: MaybeUndefined<super::files::FileUploadsInput>,
    /// Its own retention days (0: for ever); `null`: the server's.
    pub retention_days: MaybeUndefined<i32>,
    /// Its own spam retention days (0: for ever); `null`: the server's.
    pub spam_retention_days: MaybeUndefined<i32>,
}

/// Which failed deliveries to replay: exclusive bounds on when they failed and on when
/// they were created.
#[derive(InputObject)]
pub struct ReplayFilter {
    pub endpoint_id: Option<ID>,
    /// Only this destination's deliveries.
    pub destination_id: Option<ID>,
    pub failed_after: Option<Timestamp>,
    pub failed_before: Option<Timestamp>,
    pub created_after: Option<Timestamp>,
    pub created_before: Option<Timestamp>,
}

/// Where a replayed delivery goes.
#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplayDestination {
    /// Where it was first sent, signed with the secret it was accepted under: the URL and
    /// secret captured when its submission was accepted. What a replay does when
    /// `destination` is left out or `null`.
    #[default]
    Snapshot,
    /// The endpoint's webhook URL and current secret as they are now, for a receiver that
    /// moved or a secret that was rotated because it leaked. The delivery keeps this new
    /// destination from then on.
    Current,
}

impl ReplayDestination {
    fn target(self) -> ReplayTarget {
        match self {
            ReplayDestination::Snapshot => ReplayTarget::Snapshot,
            ReplayDestination::Current => ReplayTarget::Current,
        }
    }
}

/// Pauses or resumes every destination of the endpoint `id`: the endpoint as it is then,
/// and how many held deliveries a resume made due.
async fn switched_endpoint(ctx: &Context<'_>, id: &ID, to: Switch) -> Result<(Endpoint, i64)> {
    let target = endpoint_or_not_found(id)?;
    let now = app(ctx).clock.now();
    let endpoint_id = || id.0.clone();
    let missing = || ApiError::EndpointNotFound {
        endpoint_id: endpoint_id(),
    };
    let switched = audited(ctx, Some(Owned::Endpoint(&target)), missing, async |conn| {
        let switched = db::endpoints::switch(conn, &target, to, now).await?;
        Ok(match &switched {
            Switched::Done(..) => Audited::changed(switched, vec![target.to_string()]),
            _ => Audited::unchanged(switched),
        })
    })
    .await?;
    pausing::switched_endpoint(to, &target, &switched);
    let (row, held) = answered(
        switched,
        || ApiError::EndpointNotFound {
            endpoint_id: endpoint_id(),
        },
        || ApiError::EndpointDeleted {
            endpoint_id: endpoint_id(),
        },
    )?;
    Ok((Endpoint::new(row), held))
}

/// Changes an endpoint and its first webhook destination in one transaction
/// (`db::endpoints::update_with`) and drops this process's cached copy: `change` computes
/// their new state from the current one. Answers the endpoint with its destinations as
/// they are after the change. Unknown: `ENDPOINT_NOT_FOUND`; a tombstone takes no changes
/// (`ENDPOINT_DELETED`).
async fn change_endpoint<F>(
    ctx: &Context<'_>,
    id: &ID,
    target: EndpointId,
    change: F,
) -> Result<(Endpoint, Option<DestinationRow>)>
where
    F: FnOnce(
            EndpointRow,
            Option<DestinationRow>,
        ) -> Result<(EndpointRow, Option<DestinationRow>), ApiError>
        + Send
        + 'static,
{
    let now = app(ctx).clock.now();
    let missing = || ApiError::EndpointNotFound {
        endpoint_id: id.0.clone(),
    };
    let owner = target.clone();
    let updated = audited(
        ctx,
        Some(Owned::Endpoint(&owner)),
        missing,
        async move |conn| {
            let updated = db::endpoints::update_with::<ApiError, _>(
                conn,
                &target,
                now,
                move |current, webhook| {
                    refuse_deleted(&current)?;
                    change(current, webhook)
                },
            )
            .await;
            let destinations = match &updated {
                Ok(Some(_)) => {
                    db::destinations::of_endpoints(conn, std::slice::from_ref(&target)).await?
                }
                _ => Vec::new(),
            };
            let outcome = updated.map(|found| {
                found
                    .map(|(row, webhook)| (Endpoint::with_destinations(row, destinations), webhook))
            });
            Ok(match outcome {
                Ok(Some(_)) => Audited::changed(outcome, vec![target.to_string()]),
                _ => Audited::unchanged(outcome),
            })
        },
    )
    .await??;
    app(ctx).intake.endpoints.invalidate(id);
    updated
        .ok_or(ApiError::EndpointNotFound {
            endpoint_id: id.0.clone(),
        })
        .map_err(ResolverError::from)
}

/// A deleted endpoint (a tombstone kept for its history) takes no more changes.
fn refuse_deleted(endpoint: &EndpointRow) -> Result<(), ApiError> {
    match endpoint.deleted_at {
        Some(_) => Err(ApiError::EndpointDeleted {
            endpoint_id: endpoint.id.to_string(),
        }),
        None => Ok(()),
    }
}

#[derive(InputObject)]
pub struct DeleteEndpointInput {
    pub id: ID,
    /// Keep or erase its submissions, deliveries and histories: no default, the choice
    /// is the operator's.
    pub history: EndpointHistory,
    /// Cancel deliveries still pending or processing instead of refusing; `false` when
    /// left out.
    pub cancel_deliveries: Option<bool>,
}

/// The project a new endpoint goes into (see `CreateEndpointInput.projectId`); whether
/// it is live is checked in the insert's transaction.
fn endpoint_project(ctx: &Context<'_>, asked: Option<&ID>) -> Result<ProjectId> {
    let not_found = |id: &ID| ApiError::ProjectNotFound {
        project_id: id.0.clone(),
    };
    match (asked, view(ctx)) {
        (None, Some(view)) => Ok(view.clone()),
        (None, None) => Ok(ProjectId::default_project()),
        (Some(asked), view) => {
            let id = ProjectId::parse(asked).ok_or_else(|| not_found(asked))?;
            match view {
                Some(view) if *view != id => Err(not_found(asked).into()),
                _ => Ok(id),
            }
        }
    }
}

/// Origins as the row stores them (a `text[]` column).
fn stored_origins(origins: Vec<String>) -> Vec<Option<String>> {
    origins.into_iter().map(Some).collect()
}

#[derive(Default)]
pub struct MutationRoot;

#[Object]
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
            return Err(ApiError::InvalidEndpointId.into());
        };
        let name = rules::name(&input.name)?;
        let webhook_url = input
            .webhook_url
            .as_deref()
            .map(|url| rules::webhook_url(url, config.webhook.allow_private_targets))
            .transpose()?;
        let now = app.clock.now();
        let webhook_secret = webhook_url.as_ref().map(|_| rules::new_secret());
        let webhook = webhook_url
            .zip(webhook_secret.clone())
            .map(|(url, secret)| DestinationRow::webhook(id.clone(), 1, url, secret, now));
        let endpoint = EndpointRow {
            is_active: input.is_active.unwrap_or(true),
            redirect_url: input
                .redirect_url
                .as_deref()
                .map(rules::redirect_url)
                .transpose()?,
            allowed_origins: stored_origins(rules::allowed_origins(
                input.allowed_origins.as_deref().unwrap_or_default(),
            )?),
            honeypot_field: input
                .honeypot_field
                .as_deref()
                .map(|name| rules::honeypot_field(name, config.intake.max_field_name_length))
                .transpose()?,
            file_uploads: input
                .file_uploads
                .map(super::files::FileUploadsInput::settings)
                .transpose()?,
            retention_days: input
                .retention_days
                .map(|days| rules::retention_days(Setting::RetentionDays, days))
                .transpose()?,
            spam_retention_days: input
                .spam_retention_days
                .map(|days| rules::retention_days(Setting::SpamRetentionDays, days))
                .transpose()?,
            project_id: endpoint_project(ctx, input.project_id.as_ref())?,
            ..EndpointRow::new(id, name, now)
        };
        let project = endpoint.project_id.clone();
        let project_missing = || ApiError::ProjectNotFound {
            project_id: project.to_string(),
        };
        let inserted = audited(ctx, None, project_missing, async |conn| {
            // The project is held against a concurrent deletion until the insert commits.
            if !db::projects::hold_live(conn, &endpoint.project_id).await? {
                return Ok(Audited::unchanged(None));
            }
            // A taken id is an answer, not a failure of the call: taken by a live
            // endpoint, or by a deleted one whose history is kept.
            let inserted = db::endpoints::insert(conn, &endpoint, webhook).await?;
            let row = db::endpoints::find(conn, &endpoint.id).await?;
            Ok(match inserted {
                true => Audited::changed_in(
                    Some((inserted, row)),
                    vec![endpoint.id.to_string()],
                    Some(endpoint.project_id.clone()),
                ),
                false => Audited::unchanged(Some((inserted, row))),
            })
        })
        .await?
        .ok_or_else(project_missing)?;
        // This process's intake sees the new endpoint at once; others on notification.
        app.intake.endpoints.invalidate(&input.id);
        let endpoint = match inserted {
            (true, Some(row)) => Endpoint::new(row),
            (true, None) => {
                return Err(ApiError::Internal("a created endpoint vanished".into()).into())
            }
            // Another project's id is taken as any is: the id is a public form address,
            // one namespace for every project (its being deleted is not told).
            (false, Some(taken))
                if taken.deleted_at.is_some()
                    && view(ctx).is_none_or(|view| taken.project_id == *view) =>
            {
                return Err(ApiError::EndpointDeleted {
                    endpoint_id: input.id.0,
                }
                .into())
            }
            (false, _) => {
                return Err(ApiError::EndpointAlreadyExists {
                    endpoint_id: input.id.0,
                }
                .into())
            }
        };
        Ok(EndpointSecretPayload {
            endpoint,
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
            }
            .into());
        };
        let name = input.name.as_deref().map(rules::name).transpose()?;
        let redirect_url = patch(input.redirect_url).checked(|url| rules::redirect_url(&url))?;
        let allowed_origins = match &input.allowed_origins {
            MaybeUndefined::Value(origins) => {
                Some(stored_origins(rules::allowed_origins(origins)?))
            }
            MaybeUndefined::Null => Some(Vec::new()),
            MaybeUndefined::Undefined => None,
        };
        let max_field = config.intake.max_field_name_length;
        let honeypot_field = patch(input.honeypot_field)
            .checked(|field| rules::honeypot_field(&field, max_field))?;
        let file_uploads = patch(input.file_uploads).checked(|files| files.settings())?;
        let retention_days = patch(input.retention_days)
            .checked(|days| rules::retention_days(Setting::RetentionDays, days))?;
        let spam_retention_days = patch(input.spam_retention_days)
            .checked(|days| rules::retention_days(Setting::SpamRetentionDays, days))?;
        let webhook_url = input.webhook_url.clone();
        let allow_private = config.webhook.allow_private_targets;
        let candidate_secret = rules::new_secret();
        let secret_for_change = candidate_secret.clone();
        let is_active = input.is_active;
        let now = app.clock.now();
        let (endpoint, webhook) = change_endpoint(ctx, &input.id, id, move |current, webhook| {
            let mut next = current;
            if let Some(name) = name {
                next.name = name;
            }
            if let Some(is_active) = is_active {
                next.is_active = is_active;
            }
            let webhook = match (webhook_url, webhook) {
                (MaybeUndefined::Undefined, webhook) => webhook,
                // A new receiver (or none) has no use for a secret of the old one: no
                // overlap.
                (MaybeUndefined::Null, _) => None,
                (MaybeUndefined::Value(url), Some(webhook))
                    if Some(url.trim()) == webhook.url.as_deref() =>
                {
                    Some(webhook)
                }
                (MaybeUndefined::Value(url), webhook) => {
                    let url = rules::webhook_url(&url, allow_private)?;
                    Some(match webhook {
                        Some(webhook) => webhook.readdressed(url, secret_for_change),
                        None => {
                            DestinationRow::webhook(next.id.clone(), 0, url, secret_for_change, now)
                        }
                    })
                }
            };
            redirect_url.apply(&mut next.redirect_url);
            if let Some(origins) = allowed_origins {
                next.allowed_origins = origins;
            }
            honeypot_field.apply(&mut next.honeypot_field);
            file_uploads.apply(&mut next.file_uploads);
            retention_days.apply(&mut next.retention_days);
            spam_retention_days.apply(&mut next.spam_retention_days);
            Ok((next, webhook))
        })
        .await?;
        let made = webhook
            .as_ref()
            .is_some_and(|w| w.secret.as_deref() == Some(candidate_secret.as_str()));
        Ok(EndpointSecretPayload {
            endpoint,
            webhook_secret: made.then_some(candidate_secret),
        })
    }

    /// A new signing secret for the same URL. Queued deliveries keep the old one in
    /// `Hymical-Signature`; the old one also keeps signing `webhook-signature`, beside the
    /// new one, for `overlapSeconds` (left out: `FORMS_WEBHOOK_SECRET_OVERLAP_SECONDS`,
    /// 24 hours by default; 0: no overlap), so receivers can switch at their own pace. A
    /// secret replaced by an earlier rotation stops signing `webhook-signature` now.
    async fn rotate_webhook_secret(
        &self,
        ctx: &Context<'_>,
        endpoint_id: ID,
        overlap_seconds: Option<i32>,
    ) -> Result<EndpointSecretPayload> {
        let rotation = rotation(ctx, overlap_seconds)?;
        let target = endpoint_or_not_found(&endpoint_id)?;
        let secret = rotation.secret.clone();
        let id = endpoint_id.0.clone();
        let (endpoint, _) = change_endpoint(ctx, &endpoint_id, target, move |current, webhook| {
            let Some(webhook) = webhook else {
                return Err(ApiError::EndpointHasNoWebhook { endpoint_id: id });
            };
            Ok((current, Some(webhook.rotated(rotation))))
        })
        .await?;
        Ok(EndpointSecretPayload {
            endpoint,
            webhook_secret: Some(secret),
        })
    }

    /// Ends a rotation's overlap now: the replaced secret stops signing `webhook-signature`
    /// at once (`Hymical-Signature` of deliveries accepted under it keeps it). Changes
    /// nothing when there is none.
    async fn end_webhook_secret_overlap(
        &self,
        ctx: &Context<'_>,
        endpoint_id: ID,
    ) -> Result<EndpointPayload> {
        let target = endpoint_or_not_found(&endpoint_id)?;
        let (endpoint, _) = change_endpoint(ctx, &endpoint_id, target, move |current, webhook| {
            Ok((current, webhook.map(DestinationRow::overlap_ended)))
        })
        .await?;
        Ok(EndpointPayload { endpoint })
    }

    /// Pauses an endpoint's deliveries by hand (reason `OPERATOR`): submissions are still
    /// accepted and queued, nothing is attempted until `resumeEndpoint`. An endpoint
    /// paused already stays as it is (with its reason and time).
    async fn pause_endpoint(&self, ctx: &Context<'_>, endpoint_id: ID) -> Result<EndpointPayload> {
        switched_endpoint(ctx, &endpoint_id, Switch::Pause(PauseReason::Operator))
            .await
            .map(|(endpoint, _)| EndpointPayload { endpoint })
    }

    /// Resumes a paused endpoint, whatever paused it: its held deliveries are due at once,
    /// each with the attempts it had left, and its run of failed deliveries starts again.
    /// An endpoint not paused stays as it is (`heldDeliveries: 0`).
    async fn resume_endpoint(
        &self,
        ctx: &Context<'_>,
        endpoint_id: ID,
    ) -> Result<ResumeEndpointPayload> {
        let (endpoint, held) = switched_endpoint(ctx, &endpoint_id, Switch::Resume).await?;
        Ok(ResumeEndpointPayload {
            endpoint,
            held_deliveries: i32::try_from(held).unwrap_or(i32::MAX),
        })
    }

    /// Deletes an endpoint: public intake answers 404 for it from then on (other
    /// processes within `FORMS_ENDPOINT_CACHE_SECONDS`). Refused with
    /// `ENDPOINT_HAS_DELIVERIES_IN_PROGRESS` while deliveries are pending or processing,
    /// unless `cancelDeliveries: true`, which ends them `FAILED` (a `CANCELLED` event
    /// each). `history` is the explicit choice of what happens to its submissions,
    /// deliveries, attempts and events: `KEEP` (the endpoint stays as a tombstone and its
    /// id stays taken; `ERASE` can follow later) or `ERASE`.
    async fn delete_endpoint(
        &self,
        ctx: &Context<'_>,
        input: DeleteEndpointInput,
    ) -> Result<DeleteEndpointPayload> {
        let app = app(ctx);
        let target = endpoint_or_not_found(&input.id)?;
        let history = match input.history {
            EndpointHistory::Keep => db::endpoints::History::Keep,
            EndpointHistory::Erase => db::endpoints::History::Erase,
        };
        let cancel = input.cancel_deliveries.unwrap_or(false);
        let now = app.clock.now();
        let missing = || ApiError::EndpointNotFound {
            endpoint_id: input.id.0.clone(),
        };
        let outcome = audited(ctx, Some(Owned::Endpoint(&target)), missing, async |conn| {
            let outcome = db::endpoints::delete(conn, &target, cancel, history, now).await?;
            Ok(match outcome {
                DeleteOutcome::Deleted { .. } => {
                    Audited::changed(outcome, vec![target.to_string()])
                }
                _ => Audited::unchanged(outcome),
            })
        })
        .await?;
        app.intake.endpoints.invalidate(&input.id);
        match outcome {
            DeleteOutcome::Deleted { cancelled } => {
                tracing::warn!(endpoint_id = %target, history = ?history, cancelled, "endpoint deleted");
                // Erased submissions' files were detached by the delete: their bytes go now.
                app.files.sweep_logged().await;
                Ok(DeleteEndpointPayload {
                    deleted_endpoint_id: input.id,
                    history: input.history,
                    cancelled_deliveries: i32::try_from(cancelled).unwrap_or(i32::MAX),
                })
            }
            DeleteOutcome::NotFound => Err(ApiError::EndpointNotFound {
                endpoint_id: input.id.0,
            }
            .into()),
            DeleteOutcome::AlreadyDeleted => Err(ApiError::EndpointDeleted {
                endpoint_id: input.id.0,
            }
            .into()),
            DeleteOutcome::InProgress {
                pending,
                processing,
            } => Err(ApiError::EndpointHasDeliveriesInProgress {
                endpoint_id: input.id.0,
                pending,
                processing,
            }
            .into()),
        }
    }

    /// Puts a failed delivery back in the queue with a fresh retry cycle. It goes where it
    /// was first sent, signed with the secret it was accepted under, unless `destination`
    /// is `CURRENT` (left out or `null`: `SNAPSHOT`).
    async fn replay_delivery(
        &self,
        ctx: &Context<'_>,
        id: ID,
        destination: Option<ReplayDestination>,
    ) -> Result<ReplayDeliveryPayload> {
        let app = app(ctx);
        let target = destination.unwrap_or_default().target();
        let now = app.clock.pinned();
        let Some(delivery) = DeliveryId::parse(&id) else {
            return Err(ApiError::DeliveryNotFound { delivery_id: id.0 }.into());
        };
        let missing = || ApiError::DeliveryNotFound {
            delivery_id: id.0.clone(),
        };
        let replayed = audited(
            ctx,
            Some(Owned::Delivery(&delivery)),
            missing,
            async |conn| {
                let outcome = db::deliveries::replay(conn, &delivery, target, now).await?;
                Ok(match outcome {
                    ReplayOutcome::Replayed(_) => {
                        Audited::changed(outcome, vec![delivery.to_string()])
                    }
                    _ => Audited::unchanged(outcome),
                })
            },
        )
        .await?;
        match replayed {
            ReplayOutcome::Replayed(row) => Ok(ReplayDeliveryPayload {
                delivery: Delivery(row),
            }),
            ReplayOutcome::NotFound => Err(ApiError::DeliveryNotFound { delivery_id: id.0 }.into()),
            ReplayOutcome::NotReplayable {
                state: DeliveryState::Failed,
                endpoint_id,
                endpoint_deleted: false,
                submission_erased: false,
                webhook_gone: true,
                ..
            } => Err(ApiError::EndpointHasNoWebhook {
                endpoint_id: endpoint_id.to_string(),
            }
            .into()),
            ReplayOutcome::NotReplayable {
                state,
                submission_erased,
                endpoint_deleted,
                destination_removed,
                ..
            } => Err(ApiError::DeliveryNotReplayable {
                delivery_id: id.0,
                state,
                reason: if state != DeliveryState::Failed {
                    None
                } else if endpoint_deleted {
                    Some(NotReplayable::EndpointDeleted)
                } else if submission_erased {
                    Some(NotReplayable::SubmissionErased)
                } else {
                    destination_removed.then_some(NotReplayable::DestinationRemoved)
                },
            }
            .into()),
        }
    }

    /// Replays every failed delivery matching the filter, in one statement. With `dryRun`
    /// (`true`; left out or `null`: `false`) nothing changes and `count` says how many it
    /// would replay now, to confirm first. With `destination: CURRENT` each goes to its
    /// endpoint's webhook as it is now, and deliveries of an endpoint without a webhook
    /// are left failed (and not counted).
    async fn replay_deliveries(
        &self,
        ctx: &Context<'_>,
        filter: ReplayFilter,
        dry_run: Option<bool>,
        destination: Option<ReplayDestination>,
    ) -> Result<ReplayDeliveriesPayload> {
        let app = app(ctx);
        let target = destination.unwrap_or_default().target();
        let (failed_after, failed_before) = time_range(filter.failed_after, filter.failed_before)?;
        let (created_after, created_before) =
            time_range(filter.created_after, filter.created_before)?;
        let Some(endpoint_id) = scope(filter.endpoint_id.as_ref(), EndpointId::parse) else {
            return Ok(ReplayDeliveriesPayload { count: 0 });
        };
        let Some(destination_id) = scope(filter.destination_id.as_ref(), DestinationId::parse)
        else {
            return Ok(ReplayDeliveriesPayload { count: 0 });
        };
        let query = ReplayQuery {
            project: view(ctx).cloned(),
            endpoint_id,
            destination_id,
            failed_after,
            failed_before,
            created_after,
            created_before,
        };
        let now = app.clock.pinned();
        let count = if dry_run == Some(true) {
            database(ctx)
                .run(async |conn| db::deliveries::count_replayable(conn, &query, target).await)
                .await?
        } else {
            let nothing = || ApiError::Internal("a replay without a target".into());
            audited(ctx, None, nothing, async |conn| {
                let count = db::deliveries::replay_matching(conn, &query, target, now).await?;
                if count == 0 {
                    return Ok(Audited::unchanged(count));
                }
                // The entry belongs to the project of the endpoint or destination the
                // filter names, if any.
                let project = match (&query.endpoint_id, &query.destination_id) {
                    (Some(id), _) => db::projects::owner_of(conn, Owned::Endpoint(id)).await?,
                    (None, Some(id)) => {
                        db::projects::owner_of(conn, Owned::Destination(id)).await?
                    }
                    (None, None) => query.project.clone(),
                };
                let targets = query.endpoint_id.iter().map(ToString::to_string).collect();
                Ok(Audited::changed_in(count, targets, project))
            })
            .await?
        };
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
        let Some(submission) = SubmissionId::parse(&id) else {
            return Err(ApiError::SubmissionNotFound {
                submission_id: id.0,
            }
            .into());
        };
        let missing = || ApiError::SubmissionNotFound {
            submission_id: id.0.clone(),
        };
        let erased = audited(
            ctx,
            Some(Owned::Submission(&submission)),
            missing,
            async |conn| {
                let outcome = db::submissions::erase(conn, &submission).await?;
                Ok(match outcome {
                    EraseOutcome::Erased => Audited::changed(outcome, vec![submission.to_string()]),
                    _ => Audited::unchanged(outcome),
                })
            },
        )
        .await?;
        match erased {
            EraseOutcome::Erased => {
                // Its files were detached by the delete: their bytes (rows, objects) go now;
                // should that fail, the workers' hourly sweep removes them.
                app(ctx).files.sweep_logged().await;
                Ok(DeleteSubmissionPayload {
                    deleted_submission_id: id,
                })
            }
            EraseOutcome::NotFound => Err(ApiError::SubmissionNotFound {
                submission_id: id.0,
            }
            .into()),
            EraseOutcome::DeliveryInProgress { state } => {
                Err(ApiError::SubmissionDeliveryInProgress {
                    submission_id: id.0,
                    state,
                }
                .into())
            }
        }
    }

    /// Erases one person's data: every submission, in any folder of any endpoint, with a
    /// field holding `value` whole (letter case and surrounding spaces aside, as the
    /// `value` filter finds them), in one transaction, with their files and what their
    /// attempts recorded of the answers. Refused, erasing nothing, while a delivery of one
    /// is still owed (`SUBMISSION_DELIVERY_IN_PROGRESS`), when none holds it
    /// (`NO_SUBMISSION_HOLDS_VALUE`), and when more than 10,000 do (`INVALID_INPUT`: a
    /// common value, not one person's).
    async fn erase_person_data(
        &self,
        ctx: &Context<'_>,
        value: String,
    ) -> Result<ErasePersonDataPayload> {
        let refused = |error| ApiError::search_refused("value", error);
        let value = FieldValue::parse(&value).map_err(refused)?;
        let project = view(ctx);
        let nothing = || ApiError::Internal("an erasure without a target".into());
        let erased = audited(ctx, None, nothing, async |conn| {
            let outcome = db::submissions::erase_holding(conn, &value, project).await?;
            // What was erased (the submissions' ids), never the value.
            Ok(match &outcome {
                PersonErasure::Erased(ids) => {
                    let targets = ids.iter().map(ToString::to_string).collect();
                    Audited::changed_in(outcome, targets, project.cloned())
                }
                _ => Audited::unchanged(outcome),
            })
        })
        .await?;
        match erased {
            PersonErasure::Erased(ids) => {
                // Their files were detached by the delete: their bytes go now; should
                // that fail, the workers' hourly sweep removes them.
                app(ctx).files.sweep_logged().await;
                Ok(ErasePersonDataPayload {
                    erased_submission_ids: ids.iter().map(|id| ID(id.to_string())).collect(),
                })
            }
            PersonErasure::NothingHolds => Err(ApiError::NoSubmissionHoldsValue.into()),
            PersonErasure::TooMany => Err(refused(SearchError::HeldByTooMany).into()),
            PersonErasure::DeliveryInProgress {
                submission_id,
                state,
            } => Err(ApiError::SubmissionDeliveryInProgress {
                submission_id: submission_id.to_string(),
                state,
            }
            .into()),
        }
    }
}
