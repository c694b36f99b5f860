//! Public intake: `POST /f/{endpoint_id}` (docs/intake.md).
//!
//! The checks run in the specified order and the first failure answers; nothing of the
//! submission is stored on any failure. The submission and its delivery are written in
//! one statement (the transactional outbox), which also wakes the workers.

pub mod browser;
pub mod committer;
pub mod endpoint_cache;
pub mod fields;
pub mod files;
pub mod parse;
pub mod rate_limit;
pub mod screening;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::json;
use tracing::Instrument;

use crate::clock::{format_timestamp, Clock};
use crate::config::Config;
use crate::db::models::EndpointRow;
use crate::db::models::KeyedSubmission;
use crate::db::submissions::NewSubmission;
use crate::db::Db;
use crate::error::ApiError;
use crate::files::Files;
use crate::http::BodyBudget;
use crate::model::fields::count_stored_values;
use crate::model::files::FileUploadSettings;
use crate::model::ids::{DeliveryId, EndpointId, SubmissionId};
use crate::telemetry::traces;
use endpoint_cache::IntakeEndpoint;
use files::Uploads;

use committer::{Counted, EndpointStage, IntakeRequest, Work};
use fields::{Honeypot, NormalisedFields};
use rate_limit::Limit;

/// What intake's handlers share: their part of the application's state (the application
/// hands it over through [`axum::extract::FromRef`], so intake needs nothing above it).
pub struct Intake {
    pub config: Config,
    pub db: Db,
    pub clock: Arc<dyn Clock>,
    /// The endpoints intake has read, kept current by the LISTEN connection.
    pub endpoints: Arc<endpoint_cache::EndpointCache>,
    /// The group commit: the queue its writers take batches from.
    pub committer: committer::Committer,
    /// The request bodies held at once, shared with every other route that reads one.
    pub body_budget: BodyBudget,
    /// The captcha, spam rules and Akismet.
    pub screening: screening::Screening,
    /// Where the files of endpoints that take them go.
    pub files: Arc<Files>,
}

/// [`Intake`] as the handlers' state.
#[derive(Clone)]
pub struct IntakeState(pub Arc<Intake>);

impl std::ops::Deref for IntakeState {
    type Target = Intake;

    fn deref(&self) -> &Intake {
        &self.0
    }
}

pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    IntakeState: axum::extract::FromRef<S>,
{
    Router::new()
        .route("/f/{endpoint_id}", post(submit).options(preflight))
        .route("/f/{endpoint_id}/stamp", get(form_stamp))
        .route_layer(middleware::from_fn(count_submissions))
}

/// Counts every answered submission (not preflights) by status, with its duration.
async fn count_submissions(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    crate::telemetry::meters::intake_request(response.status().as_u16(), started.elapsed());
    response
}

/// What a successful (or honeypot-faked) submission answers.
pub struct Accepted {
    submission_id: SubmissionId,
    endpoint_id: EndpointId,
    received_at: DateTime<Utc>,
    field_count: usize,
    idempotent_replay: bool,
    delivery_queued: bool,
}

async fn submit(
    State(intake): State<IntakeState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    endpoint_id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint_id = endpoint_id.ok().map(|Path(id)| id);
    let mut endpoint = None;
    // The submission's span (telemetry/traces.rs): its ids and the answer's status, each
    // recorded once known; never the path as sent, which is the client's text.
    let span = tracing::info_span!(
        target: traces::TARGET,
        "submission",
        endpoint_id = tracing::field::Empty,
        submission_id = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    let result = accept(
        &intake,
        peer.ip(),
        endpoint_id,
        &headers,
        body,
        &mut endpoint,
    )
    .instrument(span.clone())
    .await;
    if let Some(endpoint) = &endpoint {
        span.record("endpoint_id", endpoint.row.id.as_str());
    }
    let mut response = match result {
        Ok(accepted) => {
            span.record("submission_id", accepted.submission_id.as_str());
            success_response(accepted, endpoint.as_deref().map(|e| &e.row), &headers)
        }
        Err(error) => error.into_response(),
    };
    span.record("http.response.status_code", response.status().as_u16());
    browser::add_cors_headers(
        response.headers_mut(),
        endpoint.as_deref().map(|e| &e.row),
        header_text(&headers, header::ORIGIN),
    );
    response
}

/// The checks of intake in order (docs/intake.md). `endpoint` receives the endpoint once it is
/// known, for the CORS headers of whatever the answer is.
async fn accept(
    intake: &Intake,
    peer: IpAddr,
    endpoint_id: Option<String>,
    headers: &HeaderMap,
    body: Body,
    endpoint: &mut Option<Arc<IntakeEndpoint>>,
) -> Result<Accepted, ApiError> {
    // A multipart post to an endpoint that takes files streams (docs/intake.md, "Files");
    // every other request is read whole first, as always.
    if let Some(settings) = file_settings(intake, endpoint_id.as_deref(), headers).await? {
        return accept_with_files(intake, peer, endpoint_id, headers, body, settings, endpoint)
            .await;
    }
    // 1. Body size: a declared length is judged before any byte is read.
    let limit_bytes = intake.config.intake.max_body_bytes;
    let declared =
        header_text(headers, header::CONTENT_LENGTH).and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit_bytes as u64) {
        return Err(ApiError::RequestBodyTooLarge { limit_bytes });
    }
    let body = crate::http::read_body(
        body,
        limit_bytes,
        intake.config.http.body_read_timeout,
        &intake.body_budget,
    )
    .await?;
    let now = intake.clock.now();
    let request = prepare(
        intake,
        peer,
        endpoint_id,
        headers,
        Content::Read(body.bytes().clone()),
        now,
        endpoint,
    )
    .await;
    let answer = intake
        .committer
        .submit(request)
        .instrument(outbox_write_span())
        .await;
    // The body counts against the budget of bodies held until its submission is answered.
    drop(body);
    answer
}

/// The span of a submission's wait for its batch and that batch's commit, a child of the
/// submission's span (telemetry/traces.rs).
fn outbox_write_span() -> tracing::Span {
    tracing::info_span!(target: traces::TARGET, "outbox write")
}

/// The file settings of the request's endpoint when the request is multipart and the
/// endpoint takes files; `None` otherwise, and whenever the endpoint cannot be found
/// (the checks in order then answer that, as for any request).
async fn file_settings(
    intake: &Intake,
    endpoint_id: Option<&str>,
    headers: &HeaderMap,
) -> Result<Option<FileUploadSettings>, ApiError> {
    let content_type = header_text(headers, header::CONTENT_TYPE);
    if !matches!(
        parse::media_type(content_type),
        Ok(parse::MediaType::Multipart)
    ) {
        return Ok(None);
    }
    let Ok(found) = find_endpoint(intake, endpoint_id).await else {
        return Ok(None);
    };
    found
        .file_upload_settings()
        .map_err(|_| ApiError::Internal("an endpoint's stored file settings do not parse".into()))
}

/// [`accept`] for an endpoint that takes files: the body is never read whole. Its limit is
/// the endpoint's total for files plus `FORMS_MAX_BODY_BYTES` for the text, and the whole
/// request must arrive within `FORMS_FILE_UPLOAD_TIMEOUT_SECONDS`. Files are stored as
/// they arrive and attached by the outbox statement; whatever the answer, anything the
/// request stored that no submission holds is removed before it is sent.
async fn accept_with_files(
    intake: &Intake,
    peer: IpAddr,
    endpoint_id: Option<String>,
    headers: &HeaderMap,
    body: Body,
    settings: FileUploadSettings,
    endpoint: &mut Option<Arc<IntakeEndpoint>>,
) -> Result<Accepted, ApiError> {
    let text_limit = intake.config.intake.max_body_bytes;
    let limit_bytes = usize::try_from(settings.max_total_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(text_limit);
    let declared =
        header_text(headers, header::CONTENT_LENGTH).and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit_bytes as u64) {
        return Err(ApiError::RequestBodyTooLarge { limit_bytes });
    }
    // The upload's window of memory counts against the bodies held at once: however many
    // connections upload, memory stays bounded (503 server_busy past it, before a byte).
    let _held = intake
        .body_budget
        .hold(intake.files.storage.upload_memory())?;
    let mut uploads = Uploads::new(intake.files.clone());
    let now = intake.clock.now();
    let timeout = intake.config.files.upload_timeout;
    let content = Content::Streamed {
        body,
        settings,
        limit_bytes,
        uploads: &mut uploads,
    };
    let prepared = tokio::time::timeout(
        timeout,
        prepare(intake, peer, endpoint_id, headers, content, now, endpoint),
    )
    .await;
    let answer = match prepared {
        Ok(request) => {
            intake
                .committer
                .submit(request)
                .instrument(outbox_write_span())
                .await
        }
        Err(_) => Err(ApiError::RequestBodyTimeout {
            limit_seconds: timeout.as_secs(),
        }),
    };
    match &answer {
        // The outbox statement may still commit (its answer was lost, or its call gave up
        // while it ran): removing the files now could take them from a submission that
        // is written after all. The sweeper removes them after the grace period if not.
        Err(ApiError::StorageUnavailable(_)) => uploads.leave_to_sweeper(),
        _ => uploads.settle().await,
    }
    answer
}

/// A request's body as the checks get it: read whole, or (an endpoint that takes files)
/// still streaming, with where its files are recorded.
enum Content<'a> {
    Read(Bytes),
    Streamed {
        body: Body,
        settings: FileUploadSettings,
        limit_bytes: usize,
        uploads: &'a mut Uploads,
    },
}

/// The per-source counter a request from `peer` is counted on (none with rate limiting
/// off): submissions and form stamps alike.
fn source_counted(
    intake: &Intake,
    peer: IpAddr,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Option<Counted> {
    let limits = &intake.config.rate_limit;
    limits.enabled.then(|| {
        let address = crate::http::client_address(peer, headers, limits.trusted_proxy_hops);
        Counted {
            subject: rate_limit::address_digest(&address, limits.ip_secret.as_ref()),
            limit: Limit {
                requests: limits.ip_requests,
                window_seconds: limits.ip_window_seconds,
            },
            now,
        }
    })
}

/// Steps 2 to 13 as far as they need no database: what the committer must count and
/// store, and each check's verdict in order (committer.rs applies the limits between
/// them). Only an endpoint the cache does not hold is read here.
#[allow(clippy::too_many_arguments)]
async fn prepare(
    intake: &Intake,
    peer: IpAddr,
    endpoint_id: Option<String>,
    headers: &HeaderMap,
    body: Content<'_>,
    now: DateTime<Utc>,
    endpoint: &mut Option<Arc<IntakeEndpoint>>,
) -> IntakeRequest {
    let limits = &intake.config.rate_limit;
    // 2. Per-source limit.
    let source = source_counted(intake, peer, headers, now);
    let stage = async {
        // 3. Id syntax; 4. lookup.
        let found = find_endpoint(intake, endpoint_id.as_deref()).await?;
        let found = &**endpoint.insert(found);
        // 5. Per-endpoint limit.
        let counted = limits.enabled.then(|| Counted {
            subject: found.id.to_string(),
            limit: Limit {
                requests: limits.endpoint_requests,
                window_seconds: limits.endpoint_window_seconds,
            },
            now,
        });
        let outcome = after_limits(intake, found, peer, headers, body, now).await;
        Ok::<_, ApiError>(EndpointStage { counted, outcome })
    };
    IntakeRequest {
        source,
        endpoint: stage.await,
    }
}

/// Steps 6 to 13.
async fn after_limits(
    intake: &Intake,
    endpoint: &IntakeEndpoint,
    peer: IpAddr,
    headers: &HeaderMap,
    body: Content<'_>,
    now: DateTime<Utc>,
) -> Result<Work, ApiError> {
    // 6. Active; 7. origin.
    if !endpoint.is_active {
        return Err(ApiError::EndpointInactive {
            endpoint_id: endpoint.id.to_string(),
        });
    }
    if !browser::origin_allowed(endpoint, header_text(headers, header::ORIGIN)) {
        return Err(ApiError::OriginNotAllowed {
            endpoint_id: endpoint.id.to_string(),
        });
    }

    // 8. Media type; 9. Idempotency-Key.
    let content_type = header_text(headers, header::CONTENT_TYPE);
    let media_type = parse::media_type(content_type)?;
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => Some(valid_idempotency_key(value)?),
    };

    // 10. Parse; 11. rules; 12. honeypot.
    let content_type = content_type.unwrap_or_default();
    let (mut pairs, files, digests) = match body {
        Content::Read(body) => (
            parse::parse(media_type, content_type, body, &intake.config.intake).await?,
            Vec::new(),
            Vec::new(),
        ),
        Content::Streamed {
            body,
            settings,
            limit_bytes,
            uploads,
        } => {
            let pairs = files::receive(
                &endpoint.id,
                &settings,
                content_type,
                body,
                &intake.config.intake,
                limit_bytes,
                uploads,
            )
            .await?;
            (pairs, uploads.ids().to_vec(), uploads.digests().to_vec())
        }
    };
    // A submission of files alone has no text field, and is not empty.
    if !pairs.is_empty() || files.is_empty() {
        fields::check_rules(&pairs, &intake.config.intake)?;
    }
    if fields::apply_honeypot(&mut pairs, endpoint.honeypot_field.as_deref()) == Honeypot::Tripped {
        // Answer exactly as a success would, so the bot learns nothing; store nothing.
        return Ok(Work::Answer(Accepted {
            submission_id: SubmissionId::generate(),
            endpoint_id: endpoint.id.clone(),
            received_at: now,
            field_count: pairs.len(),
            idempotent_replay: false,
            delivery_queued: endpoint.has_destinations,
        }));
    }
    // 13. Spam: the captcha, the rules, the form stamp, Akismet (screening.rs). A request
    // naming a stored submission by its key keeps that one's verdict: its retry carries
    // the captcha token the first request spent.
    let keyed_before = match (&idempotency_key, &endpoint.protection) {
        (Some(key), Some(protection)) if protection.row.captcha_provider.is_some() => intake
            .db
            .run(async |conn| {
                crate::db::submissions::find_by_idempotency_key(conn, &endpoint.id, key).await
            })
            .await?
            .is_some(),
        _ => false,
    };
    let screened = intake
        .screening
        .screen(
            endpoint,
            peer,
            header_text(headers, header::USER_AGENT),
            &mut pairs,
            now,
            keyed_before,
        )
        .await;
    if endpoint.protection.is_some() {
        crate::telemetry::meters::screened(match &screened {
            Ok(screened) if screened.spam_reasons.is_empty() => "accepted",
            Ok(_) => "spam",
            Err(_) => "refused",
        });
    }
    let spam_reasons = Some(screened?.spam_reasons).filter(|reasons| !reasons.is_empty());
    if pairs.is_empty() && files.is_empty() {
        // Only empty honeypot fields (or the screening's own fields) were sent.
        return Err(ApiError::EmptySubmission);
    }

    // Normalise; the committer checks the key (14) and stores it (15).
    let fields = NormalisedFields::from_pairs(pairs);
    // With files, the fingerprint covers their bytes too: the same key with other files is
    // another submission (409), not a replay.
    let idempotency = idempotency_key.map(|key| {
        let fingerprint = if digests.is_empty() {
            fields.fingerprint()
        } else {
            crate::digest::sha256_hex(
                format!("{}:{}", fields.fingerprint(), digests.join(",")).as_bytes(),
            )
        };
        (key, fingerprint)
    });
    Ok(Work::Store {
        field_count: fields.value_count(),
        submission: Box::new(NewSubmission {
            id: SubmissionId::generate(),
            endpoint_id: endpoint.id.clone(),
            received_at: now,
            fields: fields.to_json(),
            idempotency,
            delivery_id: DeliveryId::generate(),
            // The committer gives it one when this process may claim at intake.
            claim_token: None,
            spam_reasons,
            files,
            // The submission span's (this runs inside it), for its deliveries' attempts.
            trace_parent: traces::traceparent(&tracing::Span::current()),
        }),
    })
}

/// Steps 3 and 4: the path's endpoint id, well-formed and naming an endpoint (read
/// through the cache). A deleted endpoint kept for its history is not found either.
async fn find_endpoint(
    intake: &Intake,
    raw_id: Option<&str>,
) -> Result<Arc<IntakeEndpoint>, ApiError> {
    let endpoint_id = raw_id
        .and_then(EndpointId::parse)
        .ok_or(ApiError::InvalidEndpointId)?;
    intake
        .endpoints
        .find(&intake.db, &endpoint_id)
        .await?
        .filter(|endpoint| endpoint.deleted_at.is_none())
        .ok_or_else(|| ApiError::EndpointNotFound {
            endpoint_id: endpoint_id.to_string(),
        })
}

/// 16–255 characters, each in ASCII 0x21–0x7E.
fn valid_idempotency_key(value: &HeaderValue) -> Result<String, ApiError> {
    let bytes = value.as_bytes();
    let valid =
        (16..=255).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b));
    if !valid {
        return Err(ApiError::InvalidIdempotencyKey);
    }
    // Every byte is printable ASCII, so this is lossless.
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// Same key and same fields: the original answer again. Same key, other fields: 409.
fn replay(
    existing: KeyedSubmission,
    endpoint_id: &EndpointId,
    key: &str,
    fingerprint: &str,
) -> Result<Accepted, ApiError> {
    if existing.payload_fingerprint.as_deref() != Some(fingerprint) {
        return Err(ApiError::IdempotencyConflict {
            endpoint_id: endpoint_id.to_string(),
            idempotency_key: key.to_string(),
        });
    }
    Ok(Accepted {
        field_count: count_stored_values(&existing.fields),
        submission_id: existing.id,
        endpoint_id: endpoint_id.clone(),
        received_at: existing.received_at,
        idempotent_replay: true,
        delivery_queued: existing.delivery_queued,
    })
}

/// `202` with the JSON receipt, or `303` to the endpoint's redirect for a browser post.
fn success_response(
    accepted: Accepted,
    endpoint: Option<&EndpointRow>,
    headers: &HeaderMap,
) -> Response {
    let redirect = endpoint.and_then(|e| e.redirect_url.as_deref());
    if let Some(location) =
        redirect.filter(|_| browser::prefers_html(header_text(headers, header::ACCEPT)))
    {
        if let Ok(location) = HeaderValue::from_str(location) {
            return (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        }
    }
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "submission_id": accepted.submission_id,
            "endpoint_id": accepted.endpoint_id,
            "received_at": format_timestamp(accepted.received_at),
            "field_count": accepted.field_count,
            "idempotent_replay": accepted.idempotent_replay,
            "delivery": { "queued": accepted.delivery_queued },
        })),
    )
        .into_response()
}

/// `GET /f/{endpoint_id}/stamp`: a form stamp, the signed time the form was served, which
/// the form snippet puts in its `_hymical_stamp` field when the page loads (an endpoint's
/// minimum fill time judges it). CORS as for submissions; never cached. Each one is counted
/// against the per-source rate limit first, as a submission is: a stamp can be spent once,
/// and spending it writes a row kept until it expires, so the stamps one source is given,
/// and the rows it can cause, are bounded by that limit (docs/intake.md).
async fn form_stamp(
    State(intake): State<IntakeState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    endpoint_id: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let origin = header_text(&headers, header::ORIGIN);
    let endpoint_id = endpoint_id.ok().map(|Path(id)| id);
    // `?renew=<an earlier stamp>`: a new stamp that keeps the earlier one's time.
    let renew = query
        .ok()
        .and_then(|Query(mut query)| query.remove("renew"));
    let result = async {
        let now = intake.clock.now();
        if let Some(source) = source_counted(&intake, peer.ip(), &headers, now) {
            source.count_source_alone(&intake.db).await?;
        }
        let endpoint = find_endpoint(&intake, endpoint_id.as_deref()).await?;
        if !browser::origin_allowed(&endpoint, origin) {
            let endpoint_id = endpoint.id.to_string();
            return Err((Some(endpoint), ApiError::OriginNotAllowed { endpoint_id }));
        }
        let stamp = match &renew {
            Some(earlier) => {
                intake
                    .screening
                    .renewed_stamp(endpoint.id.as_str(), earlier, now)
                    .await
            }
            None => intake.screening.stamp(endpoint.id.as_str(), now).await,
        }
        .map_err(|error| (Some(endpoint.clone()), error))?;
        Ok((endpoint, stamp))
    }
    .await;
    let (endpoint, mut response) = match result {
        Ok((endpoint, stamp)) => {
            let body =
                Json(json!({ "field": crate::model::spam::FORM_STAMP_FIELD, "value": stamp }));
            (Some(endpoint), (StatusCode::OK, body).into_response())
        }
        Err((endpoint, error)) => (endpoint, error.into_response()),
    };
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    browser::add_cors_headers(
        response.headers_mut(),
        endpoint.as_deref().map(|e| &e.row),
        origin,
    );
    response
}

/// `OPTIONS /f/{endpoint_id}`: answers CORS preflights.
async fn preflight(
    State(intake): State<IntakeState>,
    endpoint_id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let origin = header_text(&headers, header::ORIGIN);
    let result = async {
        let endpoint_id = endpoint_id.ok().map(|Path(id)| id);
        let endpoint = find_endpoint(&intake, endpoint_id.as_deref()).await?;
        if !browser::origin_allowed(&endpoint, origin) {
            let endpoint_id = endpoint.id.to_string();
            return Err((Some(endpoint), ApiError::OriginNotAllowed { endpoint_id }));
        }
        Ok(endpoint)
    }
    .await;
    let (endpoint, mut response) = match result {
        Ok(endpoint) => {
            let mut response = StatusCode::NO_CONTENT.into_response();
            browser::add_preflight_headers(response.headers_mut());
            (Some(endpoint), response)
        }
        Err((endpoint, error)) => (endpoint, error.into_response()),
    };
    browser::add_cors_headers(
        response.headers_mut(),
        endpoint.as_deref().map(|e| &e.row),
        origin,
    );
    response
}

impl From<ApiError> for (Option<Arc<IntakeEndpoint>>, ApiError) {
    fn from(error: ApiError) -> Self {
        (None, error)
    }
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}
