use super::*;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::json;

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
        ApiError::DestinationNotFound { .. } => 44,
        ApiError::DestinationLimitReached { .. } => 45,
        ApiError::DestinationNotWebhook { .. } => 46,
        ApiError::EmailNotConfigured => 47,
        ApiError::TooManyFiles { .. } => 48,
        ApiError::FileTooLarge { .. } => 49,
        ApiError::FileTypeNotAllowed { .. } => 50,
        ApiError::FileStorageUnavailable(_) => 51,
        ApiError::FileNotFound { .. } => 52,
        ApiError::FileLinkInvalid => 53,
        ApiError::FileLinkExpired => 54,
        ApiError::CaptchaFailed { .. } => 55,
        ApiError::VerifierUnavailable { .. } => 56,
        ApiError::FileNameNotAllowed { .. } => 57,
        ApiError::NoSubmissionHoldsValue => 58,
        ApiError::ProjectNotFound { .. } => 59,
        ApiError::ProjectNotEmpty { .. } => 60,
        ApiError::KeyNotFound { .. } => 61,
        ApiError::InstallationKeyRequired => 62,
    }
}

const VARIANTS: usize = 63;

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
            ApiError::TooManyFiles { limit: 2 },
            S::UNPROCESSABLE_ENTITY,
            "too_many_files",
            json!({ "limit": 2 }),
        ),
        (
            ApiError::FileTooLarge {
                field: s("cv"),
                limit: "max_file_bytes",
                limit_bytes: 10,
            },
            S::PAYLOAD_TOO_LARGE,
            "file_too_large",
            json!({ "field": "cv", "limit": "max_file_bytes", "limit_bytes": 10 }),
        ),
        (
            ApiError::FileTypeNotAllowed {
                field: s("cv"),
                detected: s("application/x-executable"),
                executable: true,
            },
            S::UNPROCESSABLE_ENTITY,
            "file_type_not_allowed",
            json!({ "field": "cv", "detected": "application/x-executable", "executable": true }),
        ),
        (
            ApiError::FileNameNotAllowed {
                field: s("cv"),
                detected: s("text/plain"),
            },
            S::UNPROCESSABLE_ENTITY,
            "file_name_not_allowed",
            json!({ "field": "cv", "detected": "text/plain" }),
        ),
        (
            ApiError::FileStorageUnavailable(s("down")),
            S::SERVICE_UNAVAILABLE,
            "file_storage_unavailable",
            json!({}),
        ),
        (
            ApiError::FileNotFound {
                file_id: s("fil_x"),
            },
            S::NOT_FOUND,
            "file_not_found",
            json!({ "file_id": "fil_x" }),
        ),
        (
            ApiError::FileLinkInvalid,
            S::FORBIDDEN,
            "file_link_invalid",
            json!({}),
        ),
        (
            ApiError::FileLinkExpired,
            S::GONE,
            "file_link_expired",
            json!({}),
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
            ApiError::CaptchaFailed {
                reason: CaptchaFailure::Reused,
            },
            S::FORBIDDEN,
            "captcha_failed",
            json!({ "reason": "reused" }),
        ),
        (
            ApiError::VerifierUnavailable {
                verifier: Verifier::Akismet,
            },
            S::SERVICE_UNAVAILABLE,
            "verifier_unavailable",
            json!({ "verifier": "akismet" }),
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
            ApiError::DestinationNotFound {
                destination_id: s("d"),
            },
            S::NOT_FOUND,
            "destination_not_found",
            json!({ "destination_id": "d" }),
        ),
        (
            ApiError::DestinationLimitReached {
                endpoint_id: s("x"),
                limit: 20,
            },
            S::CONFLICT,
            "destination_limit_reached",
            json!({ "endpoint_id": "x", "limit": 20 }),
        ),
        (
            ApiError::DestinationNotWebhook {
                destination_id: s("d"),
            },
            S::CONFLICT,
            "destination_not_webhook",
            json!({ "destination_id": "d" }),
        ),
        (
            ApiError::EmailNotConfigured,
            S::CONFLICT,
            "email_not_configured",
            json!({}),
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
            ApiError::NoSubmissionHoldsValue,
            S::NOT_FOUND,
            "no_submission_holds_value",
            json!({}),
        ),
        (
            ApiError::ProjectNotFound {
                project_id: s("prj_x"),
            },
            S::NOT_FOUND,
            "project_not_found",
            json!({ "project_id": "prj_x" }),
        ),
        (
            ApiError::ProjectNotEmpty {
                project_id: s("prj_x"),
                endpoints: 2,
            },
            S::CONFLICT,
            "project_not_empty",
            json!({ "project_id": "prj_x", "endpoints": 2 }),
        ),
        (
            ApiError::InstallationKeyRequired,
            S::FORBIDDEN,
            "installation_key_required",
            json!({}),
        ),
        (
            ApiError::KeyNotFound { key_id: s("mk_x") },
            S::NOT_FOUND,
            "key_not_found",
            json!({ "key_id": "mk_x" }),
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
