//! The one error type of the HTTP and GraphQL surfaces, and its single mapping to REST
//! statuses and codes and to GraphQL `extensions.code` (docs/graphql.md, docs/intake.md).
//!
//! A variant's fields are its details: they are serialised as they are (serde), so the
//! details a client sees cannot drift from what the variant holds. Fields that are no
//! detail (the `Allow` header, an internal cause) are skipped.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::db::DbError;
use crate::feed::FeedError;
use crate::model::state::{DeliveryState, KeyRole};

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
    #[error("No delivery has this id.")]
    DeliveryNotFound { delivery_id: String },
    #[error("No submission has this id.")]
    SubmissionNotFound { submission_id: String },
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
    #[error("An unexpected error occurred.")]
    Internal(#[serde(serialize_with = "no_details")] String),
}

/// Why a `failed` delivery cannot be replayed (the state tells the other reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotReplayable {
    SubmissionErased,
    EndpointDeleted,
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitScope {
    Ip,
    Endpoint,
}

impl RateLimitScope {
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimitScope::Ip => "ip",
            RateLimitScope::Endpoint => "endpoint",
        }
    }
}

/// An internal cause: never a detail, never shown.
fn no_details<T, S: serde::Serializer>(_: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_unit()
}

/// Event ids are decimal text in the API (they are GraphQL `ID`s).
fn as_text<S: serde::Serializer>(id: &i64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(id)
}

impl From<diesel::result::Error> for ApiError {
    fn from(error: diesel::result::Error) -> Self {
        ApiError::from(DbError::Query(error))
    }
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> Self {
        ApiError::from(std::sync::Arc::new(error))
    }
}

/// A DataLoader's shared failure.
impl From<std::sync::Arc<DbError>> for ApiError {
    fn from(error: std::sync::Arc<DbError>) -> Self {
        if let DbError::CallsExhausted { limit } = *error {
            return ApiError::QueryTooComplex {
                reason: format!(
                    "it needs more than {limit} database calls (FORMS_GRAPHQL_MAX_DATABASE_CALLS)"
                ),
            };
        }
        // A row this build cannot read is no outage: trying again will not help.
        if error.is_unreadable_row() {
            ApiError::Internal(error.summary())
        } else {
            ApiError::StorageUnavailable(error)
        }
    }
}

impl From<FeedError> for ApiError {
    fn from(error: FeedError) -> Self {
        match error {
            FeedError::HistoryExpired {
                after,
                pruned_through,
            } => ApiError::EventHistoryExpired {
                after_event_id: after,
                pruned_through,
            },
            FeedError::Storage(error) => ApiError::from(error),
            FeedError::Closing => ApiError::Internal("the server is shutting down".into()),
        }
    }
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
            ApiError::TooManyFields { .. } => "too_many_fields",
            ApiError::InvalidFieldName => "invalid_field_name",
            ApiError::FieldNameTooLong { .. } => "field_name_too_long",
            ApiError::FieldValueTooLong { .. } => "field_value_too_long",
            ApiError::InvalidFieldValue { .. } => "invalid_field_value",
            ApiError::EmptySubmission => "empty_submission",
            ApiError::IdempotencyConflict { .. } => "idempotency_conflict",
            ApiError::EndpointAlreadyExists { .. } => "endpoint_already_exists",
            ApiError::InvalidWebhookUrl { .. } => "invalid_webhook_url",
            ApiError::InvalidInput { .. } => "invalid_input",
            ApiError::EndpointHasNoWebhook { .. } => "endpoint_has_no_webhook",
            ApiError::EndpointDeleted { .. } => "endpoint_deleted",
            ApiError::EndpointHasDeliveriesInProgress { .. } => {
                "endpoint_has_deliveries_in_progress"
            }
            ApiError::DeliveryNotFound { .. } => "delivery_not_found",
            ApiError::SubmissionNotFound { .. } => "submission_not_found",
            ApiError::DeliveryNotReplayable { .. } => "delivery_not_replayable",
            ApiError::SubmissionDeliveryInProgress { .. } => "submission_delivery_in_progress",
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
            ApiError::StorageUnavailable(_) | ApiError::ServerBusy { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::RequestBodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestBodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::RateLimitExceeded { .. } | ApiError::TooManyExports { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::InvalidEndpointId
            | ApiError::EndpointNotFound { .. }
            | ApiError::DeliveryNotFound { .. }
            | ApiError::SubmissionNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::EndpointInactive { .. }
            | ApiError::IdempotencyConflict { .. }
            | ApiError::EndpointAlreadyExists { .. }
            | ApiError::EndpointHasNoWebhook { .. }
            | ApiError::EndpointDeleted { .. }
            | ApiError::EndpointHasDeliveriesInProgress { .. }
            | ApiError::DeliveryNotReplayable { .. }
            | ApiError::SubmissionDeliveryInProgress { .. } => StatusCode::CONFLICT,
            ApiError::OriginNotAllowed { .. } | ApiError::InsufficientRole { .. } => {
                StatusCode::FORBIDDEN
            }
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidIdempotencyKey
            | ApiError::MalformedFormBody { .. }
            | ApiError::InvalidCursor
            | ApiError::PageSizeTooLarge { .. }
            | ApiError::QueryTooComplex { .. } => StatusCode::BAD_REQUEST,
            ApiError::FileUploadNotSupported { .. }
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

    /// The REST body: `{"error": {"code", "message", "details"?}}`.
    pub fn body(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code()));
        error.insert("message".into(), json!(self.to_string()));
        let details = self.details();
        if !details.is_empty() {
            error.insert("details".into(), Value::Object(details));
        }
        json!({ "error": error })
    }

    /// The error as one entry of a GraphQL response's `errors`, for answers made before
    /// any execution (a refused key, a refused document).
    pub fn graphql_json(&self) -> Value {
        let mut extensions = Map::new();
        extensions.insert("code".into(), json!(self.code().to_ascii_uppercase()));
        let details = self.details();
        if !details.is_empty() {
            extensions.insert("details".into(), Value::Object(details));
        }
        json!({ "message": self.to_string(), "extensions": extensions })
    }

    /// Server-side failures are logged here, once, by kind only: driver messages can quote
    /// submitted values, so they never reach a log line or a client. Inside
    /// [`logging_storage_once`], storage failures are gathered into one line instead.
    fn log(&self) {
        match self {
            ApiError::StorageUnavailable(error) => {
                let summary = error.summary();
                let gathered = OPERATION_STORAGE_FAILURES
                    .try_with(|failures| failures.record(&summary))
                    .is_ok();
                if !gathered {
                    tracing::error!(error = %summary, "storage unavailable");
                }
            }
            ApiError::Internal(what) => tracing::error!(error = %what, "internal error"),
            _ => {}
        }
    }
}

tokio::task_local! {
    static OPERATION_STORAGE_FAILURES: StorageFailures;
}

/// The storage failures of one operation: the first one's summary and how many.
#[derive(Default)]
struct StorageFailures {
    first: std::sync::OnceLock<String>,
    count: std::sync::atomic::AtomicUsize,
}

impl StorageFailures {
    fn record(&self, summary: &str) {
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = self.first.set(summary.to_string());
    }
}

/// Runs one operation (a GraphQL request, whose fields may each fail on their own) so that
/// its storage failures are logged as one line when it ends, however many fields failed:
/// an exhausted pool is one fact, not a line per field.
pub async fn logging_storage_once<F: std::future::Future>(operation: F) -> F::Output {
    OPERATION_STORAGE_FAILURES
        .scope(StorageFailures::default(), async {
            let output = operation.await;
            OPERATION_STORAGE_FAILURES.with(|failures| {
                if let Some(first) = failures.first.get() {
                    let failed_fields = failures.count.load(std::sync::atomic::Ordering::Relaxed);
                    tracing::error!(error = %first, failed_fields, "storage unavailable");
                }
            });
            output
        })
        .await
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log();
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        let headers = response.headers_mut();
        match &self {
            ApiError::MethodNotAllowed { allow } if !allow.is_empty() => {
                if let Ok(value) = HeaderValue::from_str(allow) {
                    headers.insert(header::ALLOW, value);
                }
            }
            ApiError::RateLimitExceeded {
                retry_after_seconds,
                ..
            }
            | ApiError::ServerBusy {
                retry_after_seconds,
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_seconds));
            }
            ApiError::AuthenticationRequired | ApiError::InvalidApiKey => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

/// The one conversion to a GraphQL error: message, `extensions.code` (the REST code upper
/// cased) and `extensions.details`. async-graphql also converts any `Display` type into an
/// error without extensions, so resolvers call `.extend()` rather than relying on `?`.
impl async_graphql::ErrorExtensions for ApiError {
    fn extend(&self) -> async_graphql::Error {
        self.log();
        let code = self.code().to_ascii_uppercase();
        let details = self.details();
        async_graphql::Error::new(self.to_string()).extend_with(|_, extensions| {
            extensions.set("code", code);
            if !details.is_empty() {
                if let Ok(value) = async_graphql::Value::from_json(Value::Object(details)) {
                    extensions.set("details", value);
                }
            }
        })
    }
}

impl DbError {
    /// A row was read but a value in it could not be: a build or data problem, not an
    /// outage.
    pub fn is_unreadable_row(&self) -> bool {
        matches!(
            self,
            DbError::Query(diesel::result::Error::DeserializationError(_))
        )
    }

    /// Whether the statement may have committed though the call failed: the answer was
    /// lost (a deadline, a connection that broke), not refused by the database.
    pub fn outcome_unknown(&self) -> bool {
        use diesel::result::DatabaseErrorKind as Kind;
        matches!(
            self,
            DbError::Deadline(_)
                | DbError::Query(diesel::result::Error::DatabaseError(
                    Kind::UnableToSendCommand | Kind::ClosedConnection,
                    _,
                ))
        )
    }

    /// A foreign key, named `constraint`, refused the statement.
    pub fn violates_foreign_key(&self, constraint: &str) -> bool {
        matches!(
            self,
            DbError::Query(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::ForeignKeyViolation,
                info,
            )) if info.constraint_name() == Some(constraint)
        )
    }

    /// The outbox statement counted a batch's rate limits and found a counter over its
    /// limit (the function `rate_limit_holds`, migration counted_outbox): it wrote nothing.
    pub fn exceeds_rate_limit(&self) -> bool {
        matches!(
            self,
            DbError::Query(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::CheckViolation,
                info,
            )) if info.constraint_name() == Some("rate_limit_holds")
        )
    }

    /// What went wrong, without the driver's message (which may quote values).
    pub fn summary(&self) -> String {
        use diesel::result::Error as Q;
        match self {
            DbError::Query(Q::DatabaseError(kind, info)) => match info.constraint_name() {
                Some(constraint) => format!("database error {kind:?} on constraint {constraint}"),
                None => format!("database error {kind:?}"),
            },
            DbError::Query(Q::NotFound) => "row not found".into(),
            DbError::Query(Q::DeserializationError(error)) => {
                // Diesel wraps a column's decoding error with the column's name.
                let (column, cause) =
                    match error.downcast_ref::<diesel::result::DeserializeFieldError>() {
                        Some(field) => (field.field_name.as_deref(), &field.error),
                        None => (None, error),
                    };
                let column = column.unwrap_or("a column");
                match cause.downcast_ref::<crate::model::UnknownStoredValue>() {
                    Some(unknown) => format!("{column}: {unknown}"),
                    // Other decoders' messages can quote the value, which may be submitted data.
                    None => format!("{column}: a stored value this build cannot read"),
                }
            }
            DbError::Query(other) => format!("query error: {}", variant_name(other)),
            DbError::Pool(_) => "no connection available from the pool".into(),
            DbError::Connect(_) => "cannot connect to the database".into(),
            DbError::Deadline(limit) => format!("no answer from the database within {limit:?}"),
            DbError::Unreachable => "the database refuses connections".into(),
            DbError::ShareExhausted => {
                "every connection of GraphQL's share of the pool is in use".into()
            }
            DbError::CallsExhausted { limit } => {
                format!("an operation needed more than {limit} database calls")
            }
        }
    }
}

fn variant_name(error: &diesel::result::Error) -> String {
    let debug = format!("{error:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("unknown")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graphql_code(error: &ApiError) -> (String, Option<async_graphql::Value>) {
        use async_graphql::ErrorExtensions;
        let error = error.extend();
        let extensions = error.extensions.expect("extensions set");
        let code = match extensions.get("code") {
            Some(async_graphql::Value::String(code)) => code.clone(),
            other => panic!("code missing: {other:?}"),
        };
        (code, extensions.get("details").cloned())
    }

    /// Which variant an error is: an exhaustive match, so a new variant cannot be added
    /// without this test being told about it.
    fn variant(error: &ApiError) -> usize {
        match error {
            ApiError::NotFound => 0,
            ApiError::MethodNotAllowed { .. } => 1,
            ApiError::AuthenticationRequired => 2,
            ApiError::InvalidApiKey => 3,
            ApiError::StorageUnavailable(_) => 4,
            ApiError::RequestBodyTooLarge { .. } => 5,
            ApiError::RequestBodyTimeout { .. } => 6,
            ApiError::RateLimitExceeded { .. } => 7,
            ApiError::InvalidEndpointId => 8,
            ApiError::EndpointNotFound { .. } => 9,
            ApiError::EndpointInactive { .. } => 10,
            ApiError::OriginNotAllowed { .. } => 11,
            ApiError::UnsupportedMediaType { .. } => 12,
            ApiError::InvalidIdempotencyKey => 13,
            ApiError::MalformedFormBody { .. } => 14,
            ApiError::FileUploadNotSupported { .. } => 15,
            ApiError::TooManyFields { .. } => 16,
            ApiError::InvalidFieldName => 17,
            ApiError::FieldNameTooLong { .. } => 18,
            ApiError::FieldValueTooLong { .. } => 19,
            ApiError::InvalidFieldValue { .. } => 20,
            ApiError::EmptySubmission => 21,
            ApiError::IdempotencyConflict { .. } => 22,
            ApiError::EndpointAlreadyExists { .. } => 23,
            ApiError::InvalidWebhookUrl { .. } => 24,
            ApiError::InvalidInput { .. } => 25,
            ApiError::EndpointHasNoWebhook { .. } => 26,
            ApiError::DeliveryNotFound { .. } => 27,
            ApiError::SubmissionNotFound { .. } => 28,
            ApiError::DeliveryNotReplayable { .. } => 29,
            ApiError::SubmissionDeliveryInProgress { .. } => 30,
            ApiError::InvalidTimeRange => 31,
            ApiError::InvalidCursor => 32,
            ApiError::PageSizeTooLarge { .. } => 33,
            ApiError::QueryTooComplex { .. } => 34,
            ApiError::ExportTooLarge { .. } => 35,
            ApiError::TooManyExports { .. } => 36,
            ApiError::UnsupportedExportFormat { .. } => 37,
            ApiError::EventHistoryExpired { .. } => 38,
            ApiError::Internal(_) => 39,
            ApiError::EndpointDeleted { .. } => 40,
            ApiError::EndpointHasDeliveriesInProgress { .. } => 41,
            ApiError::ServerBusy { .. } => 42,
            ApiError::InsufficientRole { .. } => 43,
        }
    }

    const VARIANTS: usize = 44;

    fn s(text: &str) -> String {
        text.to_string()
    }

    /// Every variant with its status, code and details.
    fn catalogue() -> Vec<(ApiError, StatusCode, &'static str, Value)> {
        use StatusCode as S;
        vec![
            (ApiError::NotFound, S::NOT_FOUND, "not_found", json!({})),
            (
                ApiError::MethodNotAllowed {
                    allow: s("GET, HEAD"),
                },
                S::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                json!({}),
            ),
            (
                ApiError::AuthenticationRequired,
                S::UNAUTHORIZED,
                "authentication_required",
                json!({}),
            ),
            (
                ApiError::InvalidApiKey,
                S::UNAUTHORIZED,
                "invalid_api_key",
                json!({}),
            ),
            (
                ApiError::from(DbError::Pool(s("password=hunter2"))),
                S::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                json!({}),
            ),
            (
                ApiError::InsufficientRole {
                    role: KeyRole::Read,
                    required: KeyRole::Admin,
                },
                S::FORBIDDEN,
                "insufficient_role",
                json!({ "role": "read", "required": "admin" }),
            ),
            (
                ApiError::ServerBusy {
                    retry_after_seconds: 1,
                },
                S::SERVICE_UNAVAILABLE,
                "server_busy",
                json!({ "retry_after_seconds": 1 }),
            ),
            (
                ApiError::RequestBodyTooLarge { limit_bytes: 10 },
                S::PAYLOAD_TOO_LARGE,
                "request_body_too_large",
                json!({ "limit_bytes": 10 }),
            ),
            (
                ApiError::RequestBodyTimeout { limit_seconds: 30 },
                S::REQUEST_TIMEOUT,
                "request_timeout",
                json!({ "limit_seconds": 30 }),
            ),
            (
                ApiError::RateLimitExceeded {
                    scope: RateLimitScope::Endpoint,
                    limit: 3,
                    window_seconds: 60,
                    retry_after_seconds: 7,
                },
                S::TOO_MANY_REQUESTS,
                "rate_limit_exceeded",
                json!({"scope": "endpoint", "limit": 3, "window_seconds": 60, "retry_after_seconds": 7}),
            ),
            (
                ApiError::InvalidEndpointId,
                S::NOT_FOUND,
                "invalid_endpoint_id",
                json!({}),
            ),
            (
                ApiError::EndpointNotFound {
                    endpoint_id: s("x"),
                },
                S::NOT_FOUND,
                "endpoint_not_found",
                json!({ "endpoint_id": "x" }),
            ),
            (
                ApiError::EndpointInactive {
                    endpoint_id: s("x"),
                },
                S::CONFLICT,
                "endpoint_inactive",
                json!({ "endpoint_id": "x" }),
            ),
            (
                ApiError::OriginNotAllowed {
                    endpoint_id: s("x"),
                },
                S::FORBIDDEN,
                "origin_not_allowed",
                json!({ "endpoint_id": "x" }),
            ),
            (
                ApiError::UnsupportedMediaType {
                    received: None,
                    supported: &["a/b", "c/d"],
                },
                S::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                json!({ "received": null, "supported": ["a/b", "c/d"] }),
            ),
            (
                ApiError::InvalidIdempotencyKey,
                S::BAD_REQUEST,
                "invalid_idempotency_key",
                json!({}),
            ),
            (
                ApiError::MalformedFormBody { reason: s("r") },
                S::BAD_REQUEST,
                "malformed_form_body",
                json!({ "reason": "r" }),
            ),
            (
                ApiError::FileUploadNotSupported { field: s("cv") },
                S::UNPROCESSABLE_ENTITY,
                "file_upload_not_supported",
                json!({ "field": "cv" }),
            ),
            (
                ApiError::TooManyFields {
                    limit: 1,
                    received: 2,
                },
                S::UNPROCESSABLE_ENTITY,
                "too_many_fields",
                json!({ "limit": 1, "received": 2 }),
            ),
            (
                ApiError::InvalidFieldName,
                S::UNPROCESSABLE_ENTITY,
                "invalid_field_name",
                json!({}),
            ),
            (
                ApiError::FieldNameTooLong {
                    limit: 1,
                    received: 2,
                },
                S::UNPROCESSABLE_ENTITY,
                "field_name_too_long",
                json!({ "limit": 1, "received": 2 }),
            ),
            (
                ApiError::FieldValueTooLong {
                    field: s("f"),
                    limit: 1,
                    received: 2,
                },
                S::UNPROCESSABLE_ENTITY,
                "field_value_too_long",
                json!({ "field": "f", "limit": 1, "received": 2 }),
            ),
            (
                ApiError::InvalidFieldValue { field: s("f") },
                S::UNPROCESSABLE_ENTITY,
                "invalid_field_value",
                json!({ "field": "f" }),
            ),
            (
                ApiError::EmptySubmission,
                S::UNPROCESSABLE_ENTITY,
                "empty_submission",
                json!({}),
            ),
            (
                ApiError::IdempotencyConflict {
                    endpoint_id: s("x"),
                    idempotency_key: s("k"),
                },
                S::CONFLICT,
                "idempotency_conflict",
                json!({ "endpoint_id": "x", "idempotency_key": "k" }),
            ),
            (
                ApiError::EndpointAlreadyExists {
                    endpoint_id: s("x"),
                },
                S::CONFLICT,
                "endpoint_already_exists",
                json!({ "endpoint_id": "x" }),
            ),
            (
                ApiError::InvalidWebhookUrl {
                    field: s("webhookUrl"),
                    reason: s("r"),
                },
                S::UNPROCESSABLE_ENTITY,
                "invalid_webhook_url",
                json!({ "field": "webhookUrl", "reason": "r" }),
            ),
            (
                ApiError::InvalidInput {
                    field: s("name"),
                    reason: s("r"),
                },
                S::UNPROCESSABLE_ENTITY,
                "invalid_input",
                json!({ "field": "name", "reason": "r" }),
            ),
            (
                ApiError::EndpointHasNoWebhook {
                    endpoint_id: s("x"),
                },
                S::CONFLICT,
                "endpoint_has_no_webhook",
                json!({ "endpoint_id": "x" }),
            ),
            (
                ApiError::EndpointDeleted {
                    endpoint_id: s("x"),
                },
                S::CONFLICT,
                "endpoint_deleted",
                json!({ "endpoint_id": "x" }),
            ),
            (
                ApiError::EndpointHasDeliveriesInProgress {
                    endpoint_id: s("x"),
                    pending: 2,
                    processing: 1,
                },
                S::CONFLICT,
                "endpoint_has_deliveries_in_progress",
                json!({ "endpoint_id": "x", "pending": 2, "processing": 1 }),
            ),
            (
                ApiError::DeliveryNotFound {
                    delivery_id: s("d"),
                },
                S::NOT_FOUND,
                "delivery_not_found",
                json!({ "delivery_id": "d" }),
            ),
            (
                ApiError::SubmissionNotFound {
                    submission_id: s("u"),
                },
                S::NOT_FOUND,
                "submission_not_found",
                json!({ "submission_id": "u" }),
            ),
            (
                ApiError::DeliveryNotReplayable {
                    delivery_id: s("d"),
                    state: DeliveryState::Failed,
                    reason: Some(NotReplayable::SubmissionErased),
                },
                S::CONFLICT,
                "delivery_not_replayable",
                json!({ "delivery_id": "d", "state": "failed", "reason": "submission_erased" }),
            ),
            (
                ApiError::SubmissionDeliveryInProgress {
                    submission_id: s("u"),
                    state: DeliveryState::Processing,
                },
                S::CONFLICT,
                "submission_delivery_in_progress",
                json!({ "submission_id": "u", "state": "processing" }),
            ),
            (
                ApiError::InvalidTimeRange,
                S::UNPROCESSABLE_ENTITY,
                "invalid_time_range",
                json!({}),
            ),
            (
                ApiError::InvalidCursor,
                S::BAD_REQUEST,
                "invalid_cursor",
                json!({}),
            ),
            (
                ApiError::PageSizeTooLarge {
                    limit: 100,
                    requested: 101,
                },
                S::BAD_REQUEST,
                "page_size_too_large",
                json!({ "limit": 100, "requested": 101 }),
            ),
            (
                ApiError::QueryTooComplex { reason: s("r") },
                S::BAD_REQUEST,
                "query_too_complex",
                json!({ "reason": "r" }),
            ),
            (
                ApiError::ExportTooLarge { limit: 1, count: 2 },
                S::UNPROCESSABLE_ENTITY,
                "export_too_large",
                json!({ "limit": 1, "count": 2 }),
            ),
            (
                ApiError::TooManyExports { limit: 2 },
                S::TOO_MANY_REQUESTS,
                "too_many_exports",
                json!({ "limit": 2 }),
            ),
            (
                ApiError::UnsupportedExportFormat {
                    received: s("xml"),
                    supported: &["json", "csv"],
                },
                S::UNPROCESSABLE_ENTITY,
                "unsupported_export_format",
                json!({ "received": "xml", "supported": ["json", "csv"] }),
            ),
            (
                ApiError::EventHistoryExpired {
                    after_event_id: 3,
                    pruned_through: 9,
                },
                S::GONE,
                "event_history_expired",
                json!({ "after_event_id": "3", "pruned_through": "9" }),
            ),
            (
                ApiError::Internal(s("SELECT secret")),
                S::INTERNAL_SERVER_ERROR,
                "internal_error",
                json!({}),
            ),
        ]
    }

    #[test]
    fn every_variant_maps_to_its_status_code_details_and_graphql_code() {
        let catalogue = catalogue();
        let mut seen: Vec<usize> = catalogue.iter().map(|(e, ..)| variant(e)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen,
            (0..VARIANTS).collect::<Vec<_>>(),
            "every variant, once"
        );
        for (error, status, code, details) in catalogue {
            assert_eq!(error.status(), status, "{code}");
            assert_eq!(error.code(), code);
            let body = error.body();
            assert_eq!(body["error"]["code"], code);
            match details.as_object() {
                Some(map) if map.is_empty() => {
                    assert!(body["error"].get("details").is_none(), "{code}: {body}")
                }
                _ => assert_eq!(body["error"]["details"], details, "{code}"),
            }
            let (graphql, graphql_details) = graphql_code(&error);
            assert_eq!(graphql, code.to_ascii_uppercase());
            match graphql_details {
                None => assert_eq!(details, json!({}), "{code}"),
                Some(value) => assert_eq!(value.into_json().unwrap(), details, "{code}"),
            }
            assert_eq!(error.graphql_json()["extensions"]["code"], graphql);
        }
    }

    #[test]
    fn internal_text_never_reaches_the_client() {
        let error = ApiError::from(DbError::Pool("password=hunter2".into()));
        assert!(!error.body().to_string().contains("hunter2"));
        let error = ApiError::Internal("SELECT secret".into());
        assert!(!error.body().to_string().contains("SELECT"));
    }

    #[test]
    fn headers_of_refusals() {
        let response = ApiError::InvalidApiKey.into_response();
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let response = ApiError::MethodNotAllowed {
            allow: "GET, HEAD".into(),
        }
        .into_response();
        assert_eq!(response.headers()[header::ALLOW], "GET, HEAD");
        let response = ApiError::RateLimitExceeded {
            scope: RateLimitScope::Ip,
            limit: 3,
            window_seconds: 60,
            retry_after_seconds: 7,
        }
        .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
    }

    /// Only a lost answer leaves a statement's outcome unknown; an error the database
    /// reported, or a call that never reached it, says nothing committed.
    #[test]
    fn which_failures_leave_the_outcome_unknown() {
        use diesel::result::{DatabaseErrorKind as Kind, Error as Q};
        let database = |kind| DbError::Query(Q::DatabaseError(kind, Box::new(String::new())));
        assert!(DbError::Deadline(std::time::Duration::from_secs(32)).outcome_unknown());
        assert!(database(Kind::UnableToSendCommand).outcome_unknown());
        assert!(database(Kind::ClosedConnection).outcome_unknown());
        for known in [
            database(Kind::UniqueViolation),
            database(Kind::ForeignKeyViolation),
            database(Kind::Unknown),
            DbError::Query(Q::NotFound),
            DbError::Pool("no connection".into()),
            DbError::Unreachable,
        ] {
            assert!(!known.outcome_unknown(), "{known:?}");
        }
    }
}
