//! How an error is answered: the REST body and status (with `Allow`, `Retry-After` or
//! `WWW-Authenticate` where the error calls for one), and the GraphQL error with
//! `extensions.code` and `extensions.details`.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::ApiError;

impl ApiError {
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
