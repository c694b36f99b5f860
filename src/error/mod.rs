//! The one error type of the HTTP and GraphQL surfaces, and its single mapping to REST
//! statuses and codes and to GraphQL `extensions.code` (docs/graphql.md, docs/intake.md).
//!
//! A variant's fields are its details: they are serialised as they are (serde), so the
//! details a client sees cannot drift from what the variant holds. Fields that are no
//! detail (the `Allow` header, an internal cause) are skipped.
//!
//! Here: the catalogue (variants, codes, statuses, details). Beside it: how lower layers'
//! failures become one of these (`conversions.rs`), how one is answered over REST and
//! GraphQL (`render.rs`), and how server-side ones are logged (`logging.rs`).

mod conversions;
mod logging;
mod render;
#[cfg(test)]
mod tests;

use axum::http::StatusCode;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::db::DbError;
use crate::model::rate_limit::RateLimitScope;
use crate::model::state::{DeliveryState, KeyRole};

pub use logging::logging_storage_once;

#[derive(Debug, thiserror::Error, Serialize)]
#[serde(untagged)]
pub enum ApiError {
    #[error("No route matches this path.")]
    NotFound,
    /// `allow` is the `Allow` header to send; empty when axum's router adds it.
    #[error("This route does not accept the method.")]
    MethodNotAllowed {
        #[serde(skip)]
        allow: String,
    },
    #[error("A management API key is required: send `Authorization: Bearer hym_live_…`.")]
    AuthenticationRequired,
    #[error("The management API key is not valid.")]
    InvalidApiKey,
    #[error(
        "This management API key has the {role} role; this needs a key with the {required} role."
    )]
    InsufficientRole { role: KeyRole, required: KeyRole },
    #[error(
        "The server is too busy to take this request; retry after {retry_after_seconds} seconds."
    )]
    ServerBusy { retry_after_seconds: u64 },
    #[error("Storage is unavailable; try again shortly.")]
    StorageUnavailable(
        #[source]
        #[serde(serialize_with = "no_details")]
        std::sync::Arc<DbError>,
    ),

    // Public intake, in the order the checks run.
    #[error("The request body is larger than {limit_bytes} bytes.")]
    RequestBodyTooLarge { limit_bytes: usize },
    #[error("The request body did not arrive within {limit_seconds} seconds.")]
    RequestBodyTimeout { limit_seconds: u64 },
    #[error("Too many requests; retry after {retry_after_seconds} seconds.")]
    RateLimitExceeded {
        scope: RateLimitScope,
        limit: u32,
        window_seconds: u32,
        retry_after_seconds: u64,
    },
    #[error("The endpoint id is not valid: 3 to 64 characters of a-z, 0-9, '-' and '_', starting and ending with a letter or digit.")]
    InvalidEndpointId,
    #[error("No endpoint has this id.")]
    EndpointNotFound { endpoint_id: String },
    #[error("The endpoint is not accepting submissions.")]
    EndpointInactive { endpoint_id: String },
    #[error("Submissions from this origin are not allowed for this endpoint.")]
    OriginNotAllowed { endpoint_id: String },
    #[error("The content type is not supported; send a form or a JSON object.")]
    UnsupportedMediaType {
        received: Option<String>,
        supported: &'static [&'static str],
    },
    #[error(
        "The Idempotency-Key header must be 16 to 255 printable ASCII characters without spaces."
    )]
    InvalidIdempotencyKey,
    #[error("The request body could not be parsed.")]
    MalformedFormBody { reason: String },
    #[error("File uploads are not supported.")]
    FileUploadNotSupported { field: String },
    #[error("The submission has more than {limit} files.")]
    TooManyFiles { limit: i32 },
    #[error("The file is larger than the endpoint's {limit} of {limit_bytes} bytes.")]
    FileTooLarge {
        field: String,
        /// Which limit: `max_file_bytes` (one file) or `max_total_bytes` (all together).
        limit: &'static str,
        limit_bytes: i64,
    },
    #[error("The file's content is not a type this endpoint accepts.")]
    FileTypeNotAllowed {
        field: String,
        /// The type judged from the content's first bytes.
        detected: String,
        /// A program: refused whatever the endpoint allows.
        executable: bool,
    },
    #[error("The file's name does not agree with the type of its content.")]
    FileNameNotAllowed {
        field: String,
        /// The type judged from the content's first bytes.
        detected: String,
    },
    #[error("The file storage is unavailable; try again shortly.")]
    FileStorageUnavailable(#[serde(serialize_with = "no_details")] String),
    #[error("The submission has more than {limit} values.")]
    TooManyFields { limit: usize, received: usize },
    #[error("A field name is empty or contains a control character.")]
    InvalidFieldName,
    #[error("A field name is longer than {limit} characters.")]
    FieldNameTooLong { limit: usize, received: usize },
    #[error("A field value is longer than {limit} characters.")]
    FieldValueTooLong {
        field: String,
        limit: usize,
        received: usize,
    },
    #[error("A field value contains a NUL character.")]
    InvalidFieldValue { field: String },
    #[error("The submission has no fields.")]
    EmptySubmission,
    #[error("The captcha was not solved: {reason}.")]
    CaptchaFailed { reason: CaptchaFailure },
    #[error("The {verifier} that judges this form cannot be reached; try again shortly.")]
    VerifierUnavailable { verifier: Verifier },
    #[error("This Idempotency-Key was already used with a different submission.")]
    IdempotencyConflict {
        endpoint_id: String,
        idempotency_key: String,
    },

    // Management.
    #[error("An endpoint with this id already exists.")]
    EndpointAlreadyExists { endpoint_id: String },
    #[error("The webhook URL is not allowed: {reason}.")]
    InvalidWebhookUrl { field: String, reason: String },
    #[error("The value of {field} is not valid: {reason}.")]
    InvalidInput { field: String, reason: String },
    #[error("The endpoint has no webhook.")]
    EndpointHasNoWebhook { endpoint_id: String },
    #[error("The endpoint was deleted with its history kept; its id stays taken until that history is erased (deleteEndpoint with history: ERASE).")]
    EndpointDeleted { endpoint_id: String },
    #[error("The endpoint still has deliveries pending or in flight; delete it with cancelDeliveries: true to cancel them.")]
    EndpointHasDeliveriesInProgress {
        endpoint_id: String,
        pending: i64,
        processing: i64,
    },
    #[error("No destination has this id (or it was removed).")]
    DestinationNotFound { destination_id: String },
    #[error("The endpoint has {limit} destinations already; remove one first.")]
    DestinationLimitReached { endpoint_id: String, limit: usize },
    #[error("The destination is not a webhook: it has no URL or signing secret.")]
    DestinationNotWebhook { destination_id: String },
    #[error("This server has no mail server to send email through (FORMS_SMTP_HOST).")]
    EmailNotConfigured,
    #[error("No delivery has this id.")]
    DeliveryNotFound { delivery_id: String },
    #[error("No submission has this id.")]
    SubmissionNotFound { submission_id: String },
    /// Nothing to erase: the value is not echoed, as a person's data is never logged.
    #[error("No submission holds this value.")]
    NoSubmissionHoldsValue,
    /// Unknown, deleted and another project's are one answer: a key learns nothing of
    /// projects it may not see.
    #[error("No project has this id.")]
    ProjectNotFound { project_id: String },
    #[error("The project still has endpoints; delete them first.")]
    ProjectNotEmpty { project_id: String, endpoints: i64 },
    #[error("No management key has this id.")]
    KeyNotFound { key_id: String },
    /// Projects, keys of other projects and the installation's figures are for a key of
    /// every project, not narrowed to one.
    #[error("This needs a key of every project.")]
    InstallationKeyRequired,
    #[error("Only a failed delivery whose submission and endpoint still exist can be replayed.")]
    DeliveryNotReplayable {
        delivery_id: String,
        state: DeliveryState,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<NotReplayable>,
    },
    #[error("The submission's delivery is still in progress; erase it once the delivery is delivered or failed.")]
    SubmissionDeliveryInProgress {
        submission_id: String,
        state: DeliveryState,
    },
    #[error(
        "The time range is empty or inverted: the lower bound must be before the upper bound."
    )]
    InvalidTimeRange,
    #[error("The cursor is not valid; use a cursor from a previous page.")]
    InvalidCursor,
    #[error("At most {limit} items can be asked for at once.")]
    PageSizeTooLarge { limit: usize, requested: i64 },
    #[error("The document is too expensive to run: {reason}.")]
    QueryTooComplex { reason: String },
    #[error("The export would hold {count} submissions, more than the limit of {limit}; narrow the time range or the endpoint.")]
    ExportTooLarge { limit: u64, count: u64 },
    #[error("{limit} exports are streaming already; try again when one has finished.")]
    TooManyExports { limit: usize },
    #[error("The export format is not supported; use json or csv.")]
    UnsupportedExportFormat {
        received: String,
        supported: &'static [&'static str],
    },
    #[error("Events after {after_event_id} were pruned (retention kept none at or below {pruned_through}); reload the current state and subscribe without afterEventId.")]
    EventHistoryExpired {
        #[serde(serialize_with = "as_text")]
        after_event_id: i64,
        #[serde(serialize_with = "as_text")]
        pruned_through: i64,
    },
    #[error("No file has this id (or it was erased).")]
    FileNotFound { file_id: String },
    #[error("The file link is not valid: its signature does not match.")]
    FileLinkInvalid,
    #[error("The file link has expired; ask for a new one.")]
    FileLinkExpired,
    #[error("An unexpected error occurred.")]
    Internal(#[serde(serialize_with = "no_details")] String),
}

/// Why a captcha was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum CaptchaFailure {
    /// The form carried no token in the provider's field.
    #[error("the form carried no captcha token")]
    Missing,
    /// The provider said the token is not valid (wrong, expired, for another site).
    #[error("the captcha provider refused the token")]
    Rejected,
    /// The token was solved on a host that is not one of the endpoint's allowed origins.
    #[error("the captcha was solved on another site")]
    Hostname,
    /// The token was presented before.
    #[error("the captcha token was used before")]
    Reused,
}

/// A service that judges a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum Verifier {
    #[error("captcha provider")]
    Captcha,
    #[error("spam filter (Akismet)")]
    Akismet,
    /// The endpoint's own rules, which did not finish within
    /// `FORMS_SPAM_SCREENING_BUDGET_SECONDS` (all busy, or slow on this submission).
    #[error("spam screening")]
    Screening,
}

/// Why a `failed` delivery cannot be replayed (the state tells the other reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotReplayable {
    SubmissionErased,
    EndpointDeleted,
    /// Retargeted to where its destination is now, and that destination was removed; or
    /// history of an endpoint with no webhook destination to give it.
    DestinationRemoved,
}

/// An internal cause: never a detail, never shown.
fn no_details<T, S: serde::Serializer>(_: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_unit()
}

/// Event ids are decimal text in the API (they are GraphQL `ID`s).
fn as_text<S: serde::Serializer>(id: &i64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(id)
}

impl ApiError {
    /// The catalogue code: snake_case for REST, upper-cased for GraphQL.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::AuthenticationRequired => "authentication_required",
            ApiError::InvalidApiKey => "invalid_api_key",
            ApiError::InsufficientRole { .. } => "insufficient_role",
            ApiError::StorageUnavailable(_) => "storage_unavailable",
            ApiError::ServerBusy { .. } => "server_busy",
            ApiError::Internal(_) => "internal_error",
            ApiError::QueryTooComplex { .. } => "query_too_complex",
            ApiError::RequestBodyTooLarge { .. } => "request_body_too_large",
            ApiError::RequestBodyTimeout { .. } => "request_timeout",
            ApiError::RateLimitExceeded { .. } => "rate_limit_exceeded",
            ApiError::InvalidEndpointId => "invalid_endpoint_id",
            ApiError::EndpointNotFound { .. } => "endpoint_not_found",
            ApiError::EndpointInactive { .. } => "endpoint_inactive",
            ApiError::OriginNotAllowed { .. } => "origin_not_allowed",
            ApiError::UnsupportedMediaType { .. } => "unsupported_media_type",
            ApiError::InvalidIdempotencyKey => "invalid_idempotency_key",
            ApiError::MalformedFormBody { .. } => "malformed_form_body",
            ApiError::FileUploadNotSupported { .. } => "file_upload_not_supported",
            ApiError::TooManyFiles { .. } => "too_many_files",
            ApiError::FileTooLarge { .. } => "file_too_large",
            ApiError::FileTypeNotAllowed { .. } => "file_type_not_allowed",
            ApiError::FileNameNotAllowed { .. } => "file_name_not_allowed",
            ApiError::FileStorageUnavailable(_) => "file_storage_unavailable",
            ApiError::FileNotFound { .. } => "file_not_found",
            ApiError::FileLinkInvalid => "file_link_invalid",
            ApiError::FileLinkExpired => "file_link_expired",
            ApiError::TooManyFields { .. } => "too_many_fields",
            ApiError::InvalidFieldName => "invalid_field_name",
            ApiError::FieldNameTooLong { .. } => "field_name_too_long",
            ApiError::FieldValueTooLong { .. } => "field_value_too_long",
            ApiError::InvalidFieldValue { .. } => "invalid_field_value",
            ApiError::EmptySubmission => "empty_submission",
            ApiError::IdempotencyConflict { .. } => "idempotency_conflict",
            ApiError::CaptchaFailed { .. } => "captcha_failed",
            ApiError::VerifierUnavailable { .. } => "verifier_unavailable",
            ApiError::EndpointAlreadyExists { .. } => "endpoint_already_exists",
            ApiError::InvalidWebhookUrl { .. } => "invalid_webhook_url",
            ApiError::InvalidInput { .. } => "invalid_input",
            ApiError::EndpointHasNoWebhook { .. } => "endpoint_has_no_webhook",
            ApiError::EndpointDeleted { .. } => "endpoint_deleted",
            ApiError::EndpointHasDeliveriesInProgress { .. } => {
                "endpoint_has_deliveries_in_progress"
            }
            ApiError::DestinationNotFound { .. } => "destination_not_found",
            ApiError::DestinationLimitReached { .. } => "destination_limit_reached",
            ApiError::DestinationNotWebhook { .. } => "destination_not_webhook",
            ApiError::EmailNotConfigured => "email_not_configured",
            ApiError::DeliveryNotFound { .. } => "delivery_not_found",
            ApiError::SubmissionNotFound { .. } => "submission_not_found",
            ApiError::DeliveryNotReplayable { .. } => "delivery_not_replayable",
            ApiError::SubmissionDeliveryInProgress { .. } => "submission_delivery_in_progress",
            ApiError::NoSubmissionHoldsValue => "no_submission_holds_value",
            ApiError::ProjectNotFound { .. } => "project_not_found",
            ApiError::ProjectNotEmpty { .. } => "project_not_empty",
            ApiError::KeyNotFound { .. } => "key_not_found",
            ApiError::InstallationKeyRequired => "installation_key_required",
            ApiError::InvalidTimeRange => "invalid_time_range",
            ApiError::InvalidCursor => "invalid_cursor",
            ApiError::EventHistoryExpired { .. } => "event_history_expired",
            ApiError::PageSizeTooLarge { .. } => "page_size_too_large",
            ApiError::ExportTooLarge { .. } => "export_too_large",
            ApiError::TooManyExports { .. } => "too_many_exports",
            ApiError::UnsupportedExportFormat { .. } => "unsupported_export_format",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::AuthenticationRequired | ApiError::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ApiError::StorageUnavailable(_)
            | ApiError::ServerBusy { .. }
            | ApiError::VerifierUnavailable { .. }
            | ApiError::FileStorageUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::FileTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::FileLinkInvalid => StatusCode::FORBIDDEN,
            ApiError::FileLinkExpired => StatusCode::GONE,
            ApiError::FileNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::RequestBodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestBodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::RateLimitExceeded { .. } | ApiError::TooManyExports { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::InvalidEndpointId
            | ApiError::EndpointNotFound { .. }
            | ApiError::DeliveryNotFound { .. }
            | ApiError::DestinationNotFound { .. }
            | ApiError::SubmissionNotFound { .. }
            | ApiError::NoSubmissionHoldsValue
            | ApiError::ProjectNotFound { .. }
            | ApiError::KeyNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::EndpointInactive { .. }
            | ApiError::IdempotencyConflict { .. }
            | ApiError::EndpointAlreadyExists { .. }
            | ApiError::EndpointHasNoWebhook { .. }
            | ApiError::DestinationLimitReached { .. }
            | ApiError::DestinationNotWebhook { .. }
            | ApiError::EmailNotConfigured
            | ApiError::EndpointDeleted { .. }
            | ApiError::EndpointHasDeliveriesInProgress { .. }
            | ApiError::DeliveryNotReplayable { .. }
            | ApiError::SubmissionDeliveryInProgress { .. }
            | ApiError::ProjectNotEmpty { .. } => StatusCode::CONFLICT,
            ApiError::OriginNotAllowed { .. }
            | ApiError::InsufficientRole { .. }
            | ApiError::InstallationKeyRequired
            | ApiError::CaptchaFailed { .. } => StatusCode::FORBIDDEN,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidIdempotencyKey
            | ApiError::MalformedFormBody { .. }
            | ApiError::InvalidCursor
            | ApiError::PageSizeTooLarge { .. }
            | ApiError::QueryTooComplex { .. } => StatusCode::BAD_REQUEST,
            ApiError::FileUploadNotSupported { .. }
            | ApiError::TooManyFiles { .. }
            | ApiError::FileTypeNotAllowed { .. }
            | ApiError::FileNameNotAllowed { .. }
            | ApiError::TooManyFields { .. }
            | ApiError::InvalidFieldName
            | ApiError::FieldNameTooLong { .. }
            | ApiError::FieldValueTooLong { .. }
            | ApiError::InvalidFieldValue { .. }
            | ApiError::EmptySubmission
            | ApiError::InvalidWebhookUrl { .. }
            | ApiError::InvalidInput { .. }
            | ApiError::InvalidTimeRange
            | ApiError::ExportTooLarge { .. }
            | ApiError::UnsupportedExportFormat { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::EventHistoryExpired { .. } => StatusCode::GONE,
        }
    }

    /// Machine-readable details: the variant's fields; none for a variant without any.
    pub fn details(&self) -> Map<String, Value> {
        match serde_json::to_value(self).expect("error details are plain values") {
            Value::Object(details) => details,
            // A variant without fields, or with an internal cause only.
            _ => Map::new(),
        }
    }
}
