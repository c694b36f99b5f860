//! `/graphql` over HTTP, written for this service rather than taken from async-graphql-axum,
//! because the stock handler does not do all of the following:
//!
//! - a management key on every operation, checked before the body is even parsed
//!   (introspection included): 401 with `WWW-Authenticate: Bearer` and a GraphQL error;
//! - POST only as `application/json` (text/plain, form and multipart bodies are refused,
//!   which closes the CSRF door), no array batching, the body capped like every body;
//! - GET for queries only: a mutation over GET is 405 with `Allow: POST`;
//! - `application/json` answers unless the client asks for
//!   `application/graphql-response+json`, in which case request errors use 4xx;
//! - GraphiQL for a browser's GET.
//!
//! What the stock crate does well it still does here: an executed operation's answer is
//! its `GraphQLResponse`.

use crate::http::BodyError;
use async_graphql::parser::types::OperationType;
use async_graphql::Variables;
use async_graphql_axum::GraphQLResponse;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Map, Value};

use super::FormsSchema;
use crate::app::AppState;
use crate::auth;
use crate::error::ApiError;

pub fn routes(schema: FormsSchema) -> Router<AppState> {
    Router::new()
        .route(
            "/graphql",
            get(handle).post(handle).layer(Extension(schema.clone())),
        )
        .route(
            "/graphql/ws",
            get(super::ws::upgrade).layer(Extension(super::ws::Subscriptions::new(schema))),
        )
        .route("/graphql/assets/{name}", get(crate::pages::graphiql::asset))
}

const GRAPHQL_RESPONSE_JSON: &str = "application/graphql-response+json";

/// How long an operation waits for a place among `FORMS_GRAPHQL_CONCURRENT_OPERATIONS`
/// before it is answered 503 with `Retry-After`.
const OPERATION_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The response media type the client asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Json,
    GraphqlResponseJson,
}

impl Answer {
    fn from_accept(headers: &HeaderMap) -> Answer {
        let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
            return Answer::Json;
        };
        let quality = |wanted: &str| -> f32 {
            accept
                .split(',')
                .filter_map(|range| {
                    let mut parts = range.split(';');
                    let media = parts.next()?.trim().to_ascii_lowercase();
                    (media == wanted).then(|| {
                        parts
                            .filter_map(|p| p.trim().strip_prefix("q="))
                            .find_map(|q| q.trim().parse::<f32>().ok())
                            .unwrap_or(1.0)
                    })
                })
                .fold(0.0, f32::max)
        };
        let modern = quality(GRAPHQL_RESPONSE_JSON);
        if modern > 0.0 && modern >= quality("application/json") {
            Answer::GraphqlResponseJson
        } else {
            Answer::Json
        }
    }

    fn content_type(self) -> HeaderValue {
        match self {
            Answer::Json => HeaderValue::from_static("application/json; charset=utf-8"),
            Answer::GraphqlResponseJson => {
                HeaderValue::from_static("application/graphql-response+json; charset=utf-8")
            }
        }
    }
}

/// A request that could not become a GraphQL operation: an HTTP status and a message.
pub struct Refusal {
    status: StatusCode,
    message: String,
    allow: Option<&'static str>,
}

impl Refusal {
    /// The HTTP status it is answered with (always a client error).
    #[cfg(any(test, feature = "testing"))]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
            allow: None,
        }
    }
}

fn json_response(status: StatusCode, answer: Answer, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, answer.content_type());
    response
}

fn refusal_response(refusal: Refusal, answer: Answer) -> Response {
    let body = json!({ "errors": [{ "message": refusal.message }] });
    let mut response = json_response(refusal.status, answer, &body);
    if let Some(allow) = refusal.allow {
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    if refusal.status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(crate::http::BUSY_RETRY_AFTER_SECONDS),
        );
    }
    response
}

/// A management-key failure as a GraphQL error body with the REST status.
fn unauthorized(error: ApiError, answer: Answer) -> Response {
    let status = error.status();
    let body = json!({ "errors": [error.graphql_json()] });
    let mut response = json_response(status, answer, &body);
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// A key whose role does not allow the operation: a GraphQL error body with the REST status.
fn forbidden(error: ApiError, answer: Answer) -> Response {
    let body = json!({ "errors": [error.graphql_json()] });
    json_response(error.status(), answer, &body)
}

fn wants_graphiql(method: &Method, headers: &HeaderMap, query: Option<&str>) -> bool {
    method == Method::GET
        && crate::pages::accepts_html(headers)
        && query.is_none_or(|q| !q.contains("query="))
}

async fn handle(
    State(app): State<AppState>,
    Extension(schema): Extension<FormsSchema>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let answer = Answer::from_accept(&parts.headers);
    if wants_graphiql(&parts.method, &parts.headers, parts.uri.query()) {
        return crate::pages::graphiql::page();
    }
    // Nothing is read or executed before the key is checked.
    let key =
        match auth::authenticate_headers(&app.graphql_db, &parts.headers, app.clock.now()).await {
            Ok(key) => key,
            Err(error @ (ApiError::AuthenticationRequired | ApiError::InvalidApiKey)) => {
                return unauthorized(error, answer)
            }
            Err(error) => return error.into_response(),
        };
    let mut graphql_request = match parse_request(
        &parts.method,
        &parts.headers,
        parts.uri.query(),
        body,
        app.config.intake.max_body_bytes,
        app.config.http.body_read_timeout,
        &app.body_budget,
    )
    .await
    {
        Ok(request) => request,
        Err(refusal) => return refusal_response(refusal, answer),
    };
    // Parsing, validating and running the document happen within one of the operations'
    // places: the CPU they take is bounded, whoever sends what.
    let Ok(Ok(_place)) =
        tokio::time::timeout(OPERATION_QUEUE_WAIT, app.graphql_operations.acquire()).await
    else {
        return refusal_response(
            Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is too busy to take this request; retry shortly",
            ),
            answer,
        );
    };
    let operation = match super::cost::admit(&mut graphql_request, &app.config.graphql) {
        Ok(operation) => operation,
        Err(error) => {
            // A request error, answered like a document that does not validate.
            let status = match answer {
                Answer::GraphqlResponseJson => StatusCode::BAD_REQUEST,
                Answer::Json => StatusCode::OK,
            };
            return json_response(status, answer, &json!({ "errors": [error.graphql_json()] }));
        }
    };
    if operation == Some(OperationType::Mutation) {
        if let Err(error) = key.require_admin() {
            return forbidden(error, answer);
        }
    }
    // Mutations change state, so GET (which browsers and caches send freely) may not carry one.
    if parts.method == Method::GET && operation == Some(OperationType::Mutation) {
        return refusal_response(
            Refusal {
                status: StatusCode::METHOD_NOT_ALLOWED,
                message: "mutations are only accepted over POST".into(),
                allow: Some("POST"),
            },
            answer,
        );
    }
    let address = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| {
            crate::http::client_address(
                info.0.ip(),
                &parts.headers,
                app.config.rate_limit.trusted_proxy_hops,
            )
        })
        .unwrap_or_default();
    let response = crate::error::logging_storage_once(schema.execute(super::with_operation_data(
        graphql_request,
        operation,
        &app,
        key,
        address,
    )))
    .await;
    // A request error (the document did not parse or validate) has no data at all, not
    // even `data: null`; with the modern media type it is a 400.
    if response.data == async_graphql::Value::Null && !response.errors.is_empty() {
        let status = match answer {
            Answer::GraphqlResponseJson => StatusCode::BAD_REQUEST,
            Answer::Json => StatusCode::OK,
        };
        let mut rendered = (
            status,
            Json(RequestErrors {
                errors: &response.errors,
            }),
        )
            .into_response();
        rendered
            .headers_mut()
            .insert(header::CONTENT_TYPE, answer.content_type());
        return rendered;
    }
    // An executed operation is rendered by async-graphql-axum (body, and any headers the
    // executor set); the media type is the one the client asked for.
    let mut rendered = GraphQLResponse::from(response).into_response();
    rendered
        .headers_mut()
        .insert(header::CONTENT_TYPE, answer.content_type());
    rendered
}

#[derive(serde::Serialize)]
struct RequestErrors<'a> {
    errors: &'a [async_graphql::ServerError],
}

/// Turns the HTTP request into a GraphQL request, or says why it cannot be one.
async fn parse_request(
    method: &Method,
    headers: &HeaderMap,
    query_string: Option<&str>,
    body: Body,
    limit_bytes: usize,
    body_deadline: std::time::Duration,
    budget: &crate::http::BodyBudget,
) -> Result<async_graphql::Request, Refusal> {
    let params: Map<String, Value> = if *method == Method::GET {
        let mut params = Map::new();
        for (name, value) in
            url::form_urlencoded::parse(query_string.unwrap_or_default().as_bytes())
        {
            let value = match name.as_ref() {
                "variables" | "extensions" => serde_json::from_str(&value).map_err(|_| {
                    Refusal::new(
                        StatusCode::BAD_REQUEST,
                        format!("the {name} parameter is not valid JSON"),
                    )
                })?,
                _ => Value::String(value.into_owned()),
            };
            params.insert(name.into_owned(), value);
        }
        params
    } else {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut parameters = content_type.split(';').map(str::trim);
        let media = parameters.next().unwrap_or_default();
        let charset_ok = parameters
            .filter_map(|p| p.strip_prefix("charset="))
            .all(|charset| charset.trim_matches('"').eq_ignore_ascii_case("utf-8"));
        if media != "application/json" || !charset_ok {
            return Err(Refusal::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "POST bodies must be application/json (UTF-8)",
            ));
        }
        let body = match crate::http::read_body(body, limit_bytes, body_deadline, budget).await {
            Ok(body) => body,
            Err(BodyError::TooLarge { .. }) => {
                return Err(Refusal::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body must be at most {limit_bytes} bytes"),
                ))
            }
            Err(BodyError::TimedOut { limit }) => {
                return Err(Refusal::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body did not arrive within {} seconds",
                        limit.as_secs_f64()
                    ),
                ))
            }
            Err(BodyError::Unreadable) => {
                return Err(Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                ))
            }
            Err(BodyError::ServerBusy) => {
                return Err(Refusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the server is too busy to take this request; retry shortly",
                ))
            }
        };
        return parse_json_body(body.bytes());
    };
    request_from_params(&params)
}

/// A POST body (already read) as a GraphQL request: one JSON object, no batch.
pub fn parse_json_body(bytes: &[u8]) -> Result<async_graphql::Request, Refusal> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(params)) => request_from_params(&params),
        Ok(Value::Array(_)) => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "batched requests are not supported",
        )),
        Ok(_) => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        Err(_) => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "the body is not valid JSON",
        )),
    }
}

/// `{query, operationName?, variables?, extensions?}` as a GraphQL request.
fn request_from_params(params: &Map<String, Value>) -> Result<async_graphql::Request, Refusal> {
    let query = match params.get("query") {
        Some(Value::String(query)) => query.clone(),
        Some(_) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "query must be a string",
            ))
        }
        None => return Err(Refusal::new(StatusCode::BAD_REQUEST, "a query is required")),
    };
    let mut request = async_graphql::Request::new(query);
    match params.get("operationName") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) => request = request.operation_name(name.clone()),
        Some(_) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "operationName must be a string",
            ))
        }
    }
    match params.get("variables") {
        None | Some(Value::Null) => {}
        Some(variables @ Value::Object(_)) => {
            request = request.variables(Variables::from_json(variables.clone()))
        }
        Some(_) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "variables must be an object",
            ))
        }
    }
    match params.get("extensions") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "extensions must be an object",
            ))
        }
    }
    Ok(request)
}
