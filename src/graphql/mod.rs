//! The GraphQL management API (SPEC section 7) and its HTTP handler.

use async_graphql::{EmptyMutation, EmptySubscription, Object, Schema};
use async_graphql_axum::{GraphQLRequest, GraphQLResponse};
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::app::AppState;
use crate::auth;
use crate::error::ApiError;

pub type FormsSchema = Schema<QueryRoot, EmptyMutation, EmptySubscription>;

pub struct QueryRoot;

#[Object(name = "Query")]
impl QueryRoot {
    /// The version of the running service.
    async fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
}

/// The schema with the query limits of the configuration.
pub fn build_schema(app: AppState) -> FormsSchema {
    let limits = app.config.graphql.clone();
    Schema::build(QueryRoot, EmptyMutation, EmptySubscription)
        .limit_depth(limits.max_depth)
        .limit_complexity(limits.max_complexity)
        .data(app)
        .finish()
}

/// The SDL as `hymical-forms schema` prints it and `schema.graphql` holds it.
pub fn sdl() -> String {
    Schema::build(QueryRoot, EmptyMutation, EmptySubscription)
        .finish()
        .sdl()
}

pub fn routes(schema: FormsSchema) -> Router<AppState> {
    Router::new().route(
        "/graphql",
        get(execute).post(execute).layer(axum::Extension(schema)),
    )
}

/// Authenticates before the request body is even parsed: without a usable key nothing
/// executes, introspection included.
async fn execute(
    State(app): State<AppState>,
    axum::Extension(schema): axum::Extension<FormsSchema>,
    request: Request,
) -> Response {
    let key = match auth::authenticate_headers(&app.pool, request.headers(), app.clock.now()).await
    {
        Ok(key) => key,
        Err(error) => return graphql_error_response(error),
    };
    let graphql_request =
        match GraphQLRequest::<async_graphql_axum::rejection::GraphQLRejection>::from_request(
            request,
            &(),
        )
        .await
        {
            Ok(graphql_request) => graphql_request,
            Err(rejection) => return rejection.into_response(),
        };
    GraphQLResponse::from(schema.execute(graphql_request.into_inner().data(key)).await)
        .into_response()
}

/// A request-level failure as a GraphQL error body, with the REST status.
fn graphql_error_response(error: ApiError) -> Response {
    let status = error.status();
    let unauthorized = matches!(
        error,
        ApiError::AuthenticationRequired | ApiError::InvalidApiKey
    );
    let graphql_error = async_graphql::ErrorExtensions::extend(&error);
    let server_error = graphql_error.into_server_error(async_graphql::Pos::default());
    let mut body = json!({ "errors": [server_error] });
    // A request error has no position in the document.
    if let Some(first) = body["errors"].get_mut(0).and_then(|e| e.as_object_mut()) {
        first.remove("locations");
    }
    let mut response = (status, Json(body)).into_response();
    if unauthorized {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}
