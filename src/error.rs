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
    StorageUnavailable(#[source] DbError),
    #[error("An unexpected error occurred.")]
    Internal(String),
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> Self {
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
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::AuthenticationRequired | ApiError::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ApiError::StorageUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Machine-readable details; empty ones are omitted from responses.
    pub fn details(&self) -> Map<String, Value> {
        match self {
            ApiError::NotFound
            | ApiError::MethodNotAllowed { .. }
            | ApiError::AuthenticationRequired
            | ApiError::InvalidApiKey
            | ApiError::StorageUnavailable(_)
            | ApiError::Internal(_) => Map::new(),
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
        if let ApiError::MethodNotAllowed { allow } = &self {
            match HeaderValue::from_str(allow) {
                Ok(value) if !allow.is_empty() => {
                    response.headers_mut().insert(header::ALLOW, value);
                }
                _ => {}
            }
        }
        if matches!(
            self,
            ApiError::AuthenticationRequired | ApiError::InvalidApiKey
        ) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
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
                ApiError::StorageUnavailable(DbError::Pool("timed out".into())),
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
            ),
            (
                ApiError::Internal("boom".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
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
    fn empty_details_are_omitted_on_both_surfaces() {
        assert!(ApiError::NotFound.body()["error"].get("details").is_none());
        let (_, details) = graphql_code(ApiError::NotFound);
        assert!(details.is_none());
    }

    #[test]
    fn internal_text_never_reaches_the_client() {
        let error = ApiError::StorageUnavailable(DbError::Pool("password=hunter2".into()));
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
