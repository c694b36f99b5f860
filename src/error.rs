//! The one error type of the HTTP and GraphQL surfaces, and its single mapping to REST
//! statuses and codes (SPEC section 3) and to GraphQL `extensions.code`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::db::DbError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("No route matches this path.")]
    NotFound,
    /// `allow` is the `Allow` header to send; empty when axum's router adds it.
    #[error("This route does not accept the method.")]
    MethodNotAllowed { allow: String },
    #[error("A management API key is required: send `Authorization: Bearer hym_live_…`.")]
    AuthenticationRequired,
    #[error("The management API key is not valid.")]
    InvalidApiKey,
    #[error("Storage is unavailable; try again shortly.")]
    StorageUnavailable(#[source] std::sync::Arc<DbError>),

    // Public intake (SPEC section 5), in the order the checks run.
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
    UnsupportedMediaType { received: Option<String> },
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

    // Management (SPEC sections 7, 9, 10).
    #[error("An endpoint with this id already exists.")]
    EndpointAlreadyExists { endpoint_id: String },
    #[error("The webhook URL is not allowed: {reason}.")]
    InvalidWebhookUrl { field: String, reason: String },
    #[error("The value of {field} is not valid: {reason}.")]
    InvalidInput { field: String, reason: String },
    #[error("The endpoint has no webhook.")]
    EndpointHasNoWebhook { endpoint_id: String },
    #[error("No delivery has this id.")]
    DeliveryNotFound { delivery_id: String },
    #[error("No submission has this id.")]
    SubmissionNotFound { submission_id: String },
    #[error("Only a failed delivery whose submission still exists can be replayed.")]
    DeliveryNotReplayable {
        delivery_id: String,
        state: String,
        submission_erased: bool,
    },
    #[error("The submission's delivery is still in progress; erase it once the delivery is delivered or failed.")]
    SubmissionDeliveryInProgress {
        submission_id: String,
        state: String,
    },
    #[error(
        "The time range is empty or inverted: the lower bound must be before the upper bound."
    )]
    InvalidTimeRange,
    #[error("The cursor is not valid; use a cursor from a previous page.")]
    InvalidCursor,
    #[error("At most {limit} items can be asked for at once.")]
    PageSizeTooLarge { limit: usize, requested: i64 },
    #[error("The export would hold {count} submissions, more than the limit of {limit}; narrow the time range or the endpoint.")]
    ExportTooLarge { limit: u64, count: u64 },
    #[error("{limit} exports are streaming already; try again when one has finished.")]
    TooManyExports { limit: usize },
    #[error("The export format is not supported; use json or csv.")]
    UnsupportedExportFormat { received: String },
    #[error("Events after {after_event_id} were pruned (retention kept none at or below {pruned_through}); reload the current state and subscribe without afterEventId.")]
    EventHistoryExpired {
        after_event_id: i64,
        pruned_through: i64,
    },
    #[error("The document is too expensive to run: {reason}.")]
    QueryTooComplex { reason: String },
    #[error("An unexpected error occurred.")]
    Internal(String),
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl From<diesel::result::Error> for ApiError {
    fn from(error: diesel::result::Error) -> Self {
        ApiError::from(DbError::Query(error))
    }
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> Self {
        ApiError::StorageUnavailable(std::sync::Arc::new(error))
    }
}

/// A DataLoader's shared failure.
impl From<std::sync::Arc<DbError>> for ApiError {
    fn from(error: std::sync::Arc<DbError>) -> Self {
        ApiError::StorageUnavailable(error)
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
            ApiError::StorageUnavailable(_) => "storage_unavailable",
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
            ApiError::DeliveryNotFound { .. } => "delivery_not_found",
            ApiError::SubmissionNotFound { .. } => "submission_not_found",
            ApiError::DeliveryNotReplayable { .. } => "delivery_not_replayable",
            ApiError::SubmissionDeliveryInProgress { .. } => "submission_delivery_in_progress",
            ApiError::InvalidTimeRange => "invalid_time_range",
            ApiError::InvalidCursor => "invalid_cursor",
            ApiError::EventHistoryExpired { .. } => "event_history_expired",
            ApiError::PageSizeTooLarge { .. } => "page_size_too_large",
            ApiError::ExportTooLarge { .. } => "export_too_large",
            ApiError::UnsupportedExportFormat { .. } => "unsupported_export_format",
            ApiError::TooManyExports { .. } => "too_many_exports",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::AuthenticationRequired | ApiError::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ApiError::StorageUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::RequestBodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestBodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::RateLimitExceeded { .. } | ApiError::TooManyExports { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::InvalidEndpointId | ApiError::EndpointNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            ApiError::EndpointInactive { .. } | ApiError::IdempotencyConflict { .. } => {
                StatusCode::CONFLICT
            }
            ApiError::OriginNotAllowed { .. } => StatusCode::FORBIDDEN,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidIdempotencyKey | ApiError::MalformedFormBody { .. } => {
                StatusCode::BAD_REQUEST
            }
            ApiError::FileUploadNotSupported { .. }
            | ApiError::TooManyFields { .. }
            | ApiError::InvalidFieldName
            | ApiError::FieldNameTooLong { .. }
            | ApiError::FieldValueTooLong { .. }
            | ApiError::InvalidFieldValue { .. }
            | ApiError::EmptySubmission => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::EndpointAlreadyExists { .. }
            | ApiError::EndpointHasNoWebhook { .. }
            | ApiError::DeliveryNotReplayable { .. }
            | ApiError::SubmissionDeliveryInProgress { .. } => StatusCode::CONFLICT,
            ApiError::InvalidWebhookUrl { .. }
            | ApiError::InvalidInput { .. }
            | ApiError::InvalidTimeRange
            | ApiError::ExportTooLarge { .. }
            | ApiError::UnsupportedExportFormat { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::DeliveryNotFound { .. } | ApiError::SubmissionNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            ApiError::InvalidCursor
            | ApiError::PageSizeTooLarge { .. }
            | ApiError::QueryTooComplex { .. } => StatusCode::BAD_REQUEST,
            ApiError::EventHistoryExpired { .. } => StatusCode::GONE,
        }
    }

    /// Machine-readable details; empty ones are omitted from responses.
    pub fn details(&self) -> Map<String, Value> {
        let details = match self {
            ApiError::RequestBodyTooLarge { limit_bytes } => json!({ "limit_bytes": limit_bytes }),
            ApiError::RequestBodyTimeout { limit_seconds } => {
                json!({ "limit_seconds": limit_seconds })
            }
            ApiError::RateLimitExceeded {
                scope,
                limit,
                window_seconds,
                retry_after_seconds,
            } => json!({
                "scope": scope.as_str(),
                "limit": limit,
                "window_seconds": window_seconds,
                "retry_after_seconds": retry_after_seconds,
            }),
            ApiError::EndpointNotFound { endpoint_id }
            | ApiError::EndpointInactive { endpoint_id }
            | ApiError::OriginNotAllowed { endpoint_id } => json!({ "endpoint_id": endpoint_id }),
            ApiError::UnsupportedMediaType { received } => json!({
                "received": received,
                "supported": crate::intake::SUPPORTED_MEDIA_TYPES,
            }),
            ApiError::MalformedFormBody { reason } | ApiError::QueryTooComplex { reason } => {
                json!({ "reason": reason })
            }
            ApiError::FileUploadNotSupported { field } | ApiError::InvalidFieldValue { field } => {
                json!({ "field": field })
            }
            ApiError::TooManyFields { limit, received }
            | ApiError::FieldNameTooLong { limit, received } => {
                json!({ "limit": limit, "received": received })
            }
            ApiError::FieldValueTooLong {
                field,
                limit,
                received,
            } => json!({ "field": field, "limit": limit, "received": received }),
            ApiError::IdempotencyConflict {
                endpoint_id,
                idempotency_key,
            } => json!({ "endpoint_id": endpoint_id, "idempotency_key": idempotency_key }),
            ApiError::EndpointAlreadyExists { endpoint_id }
            | ApiError::EndpointHasNoWebhook { endpoint_id } => {
                json!({ "endpoint_id": endpoint_id })
            }
            ApiError::InvalidWebhookUrl { field, reason }
            | ApiError::InvalidInput { field, reason } => {
                json!({ "field": field, "reason": reason })
            }
            ApiError::DeliveryNotFound { delivery_id } => json!({ "delivery_id": delivery_id }),
            ApiError::SubmissionNotFound { submission_id } => {
                json!({ "submission_id": submission_id })
            }
            ApiError::DeliveryNotReplayable {
                delivery_id,
                state,
                submission_erased,
            } => {
                if *submission_erased {
                    json!({ "delivery_id": delivery_id, "state": state, "reason": "submission_erased" })
                } else {
                    json!({ "delivery_id": delivery_id, "state": state })
                }
            }
            ApiError::SubmissionDeliveryInProgress {
                submission_id,
                state,
            } => {
                json!({ "submission_id": submission_id, "state": state })
            }
            ApiError::PageSizeTooLarge { limit, requested } => {
                json!({ "limit": limit, "requested": requested })
            }
            ApiError::ExportTooLarge { limit, count } => json!({ "limit": limit, "count": count }),
            ApiError::TooManyExports { limit } => json!({ "limit": limit }),
            ApiError::UnsupportedExportFormat { received } => {
                json!({ "received": received, "supported": ["json", "csv"] })
            }
            ApiError::EventHistoryExpired {
                after_event_id,
                pruned_through,
            } => json!({
                "after_event_id": after_event_id.to_string(),
                "pruned_through": pruned_through.to_string(),
            }),
            ApiError::InvalidTimeRange | ApiError::InvalidCursor => Value::Null,
            ApiError::NotFound
            | ApiError::MethodNotAllowed { .. }
            | ApiError::AuthenticationRequired
            | ApiError::InvalidApiKey
            | ApiError::StorageUnavailable(_)
            | ApiError::Internal(_)
            | ApiError::InvalidEndpointId
            | ApiError::InvalidIdempotencyKey
            | ApiError::InvalidFieldName
            | ApiError::EmptySubmission => Value::Null,
        };
        match details {
            Value::Object(map) => map,
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
    /// submitted values, so they never reach a log line or a client.
    fn log(&self) {
        match self {
            ApiError::StorageUnavailable(error) => {
                tracing::error!(error = %error.summary(), "storage unavailable")
            }
            ApiError::Internal(what) => tracing::error!(error = %what, "internal error"),
            _ => {}
        }
    }
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
    /// What went wrong, without the driver's message (which may quote values).
    pub fn summary(&self) -> String {
        use diesel::result::Error as Q;
        match self {
            DbError::Query(Q::DatabaseError(kind, info)) => match info.constraint_name() {
                Some(constraint) => format!("database error {kind:?} on constraint {constraint}"),
                None => format!("database error {kind:?}"),
            },
            DbError::Query(Q::NotFound) => "row not found".into(),
            DbError::Query(other) => format!("query error: {}", variant_name(other)),
            DbError::Pool(_) => "no connection available from the pool".into(),
            DbError::Connect(_) => "cannot connect to the database".into(),
            DbError::Deadline(limit) => format!("no answer from the database within {limit:?}"),
            DbError::Unreachable => "the database refuses connections".into(),
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

    fn graphql_code(error: ApiError) -> (String, Option<async_graphql::Value>) {
        use async_graphql::ErrorExtensions;
        let error = error.extend();
        let extensions = error.extensions.expect("extensions set");
        let code = match extensions.get("code") {
            Some(async_graphql::Value::String(code)) => code.clone(),
            other => panic!("code missing: {other:?}"),
        };
        (code, extensions.get("details").cloned())
    }

    #[test]
    fn each_error_maps_to_its_status_code_and_graphql_code() {
        let cases: Vec<(ApiError, StatusCode, &str)> = vec![
            (ApiError::NotFound, StatusCode::NOT_FOUND, "not_found"),
            (
                ApiError::MethodNotAllowed {
                    allow: "GET, HEAD".into(),
                },
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
            ),
            (
                ApiError::AuthenticationRequired,
                StatusCode::UNAUTHORIZED,
                "authentication_required",
            ),
            (
                ApiError::InvalidApiKey,
                StatusCode::UNAUTHORIZED,
                "invalid_api_key",
            ),
            (
                ApiError::from(DbError::Pool("timed out".into())),
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
            ),
            (
                ApiError::Internal("boom".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
            ),
            (
                ApiError::EventHistoryExpired {
                    after_event_id: 3,
                    pruned_through: 9,
                },
                StatusCode::GONE,
                "event_history_expired",
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!(error.status(), status, "{code}");
            assert_eq!(error.code(), code);
            assert_eq!(error.body()["error"]["code"], code);
            let (graphql, _) = graphql_code(error);
            assert_eq!(graphql, code.to_ascii_uppercase());
        }
    }

    #[test]
    fn details_reach_both_surfaces() {
        let error = ApiError::RateLimitExceeded {
            scope: RateLimitScope::Endpoint,
            limit: 3,
            window_seconds: 60,
            retry_after_seconds: 7,
        };
        assert_eq!(
            error.body()["error"]["details"],
            json!({"scope": "endpoint", "limit": 3, "window_seconds": 60, "retry_after_seconds": 7})
        );
        let response = ApiError::RateLimitExceeded {
            scope: RateLimitScope::Ip,
            limit: 3,
            window_seconds: 60,
            retry_after_seconds: 7,
        }
        .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        let (code, details) = graphql_code(error);
        assert_eq!(code, "RATE_LIMIT_EXCEEDED");
        let details = details.expect("details").into_json().unwrap();
        assert_eq!(details["scope"], "endpoint");
        let media = ApiError::UnsupportedMediaType { received: None }.body();
        assert_eq!(media["error"]["details"]["received"], Value::Null);
        assert_eq!(
            media["error"]["details"]["supported"]
                .as_array()
                .map(Vec::len),
            Some(3)
        );
    }

    #[test]
    fn replay_refusals_carry_the_state() {
        let error = ApiError::DeliveryNotReplayable {
            delivery_id: "whd_1".into(),
            state: "delivered".into(),
            submission_erased: false,
        };
        let (code, details) = graphql_code(error);
        assert_eq!(code, "DELIVERY_NOT_REPLAYABLE");
        let details = details.expect("details").into_json().unwrap();
        assert_eq!(
            details,
            json!({"delivery_id": "whd_1", "state": "delivered"})
        );
    }

    #[test]
    fn empty_details_are_omitted_on_both_surfaces() {
        assert!(ApiError::NotFound.body()["error"].get("details").is_none());
        let (_, details) = graphql_code(ApiError::NotFound);
        assert!(details.is_none());
    }

    #[test]
    fn internal_text_never_reaches_the_client() {
        let error = ApiError::from(DbError::Pool("password=hunter2".into()));
        assert!(!error.body().to_string().contains("hunter2"));
        let error = ApiError::Internal("SELECT secret".into());
        assert!(!error.body().to_string().contains("SELECT"));
    }

    #[test]
    fn unauthorized_responses_carry_www_authenticate() {
        let response = ApiError::InvalidApiKey.into_response();
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let response = ApiError::MethodNotAllowed {
            allow: "GET, HEAD".into(),
        }
        .into_response();
        assert_eq!(response.headers()[header::ALLOW], "GET, HEAD");
    }
}
