//! GraphQL subscriptions over WebSocket at `/graphql/ws` (SPEC section 8), written for
//! this service because async-graphql's stock handler does not enforce all of the
//! protocol's rules. Both subprotocols are spoken:
//!
//! - `graphql-transport-ws` (the `graphql-ws` library's protocol): `connection_init`
//!   carrying the key, `connection_ack`, `ping`/`pong`, `subscribe`, `next`, `error`,
//!   `complete`, and its close codes: 4400 invalid message, 4401 subscribe before the ack,
//!   4403 bad key, 4408 no `connection_init` within 10 s, 4409 duplicate operation id,
//!   4429 second `connection_init`;
//! - the legacy `graphql-ws` (subscriptions-transport-ws): `connection_init`,
//!   `connection_ack`/`connection_error`, `ka`, `start`, `data`, `error`, `complete`,
//!   `stop`, `connection_terminate`, with the same close codes where its rules match.
//!
//! The client's first offered subprotocol that is one of these is chosen, so the frames
//! always match what the client asked for. Without one, the socket is closed with 4406.

use std::time::Duration;

use async_graphql::Response as GraphqlResponse;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use axum::Extension;
use futures_util::stream::{self, BoxStream};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio_stream::StreamMap;

use super::loaders::Loaders;
use super::FormsSchema;
use crate::app::AppState;
use crate::auth::{self, AuthenticatedKey};
use crate::error::ApiError;

const TRANSPORT_WS: &str = "graphql-transport-ws";
const LEGACY_WS: &str = "graphql-ws";
/// A connection that has not sent `connection_init` by then is closed with 4408.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The legacy protocol's keep-alive (`ka`) interval.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Operations one connection may run at once.
pub const MAX_OPERATIONS: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    TransportWs,
    LegacyWs,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::TransportWs => TRANSPORT_WS,
            Protocol::LegacyWs => LEGACY_WS,
        }
    }
}

/// The first subprotocol the client offered that this server speaks.
fn negotiate(headers: &HeaderMap) -> Option<Protocol> {
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .find_map(|offered| match offered {
            TRANSPORT_WS => Some(Protocol::TransportWs),
            LEGACY_WS => Some(Protocol::LegacyWs),
            _ => None,
        })
}

pub async fn upgrade(
    State(app): State<AppState>,
    Extension(schema): Extension<FormsSchema>,
    headers: HeaderMap,
    mut upgrade: WebSocketUpgrade,
) -> Response {
    let protocol = negotiate(&headers);
    if let Some(protocol) = protocol {
        upgrade.set_selected_protocol(HeaderValue::from_static(protocol.name()));
    }
    upgrade
        .max_message_size(app.config.intake.max_body_bytes)
        .on_upgrade(move |socket| async move {
            let mut connection = Connection {
                app,
                schema,
                socket,
                protocol: protocol.unwrap_or(Protocol::TransportWs),
                key: None,
                init_received: false,
                operations: StreamMap::new(),
            };
            let close = match protocol {
                Some(_) => connection.serve().await,
                None => Close::new(4406, "Subprotocol not acceptable"),
            };
            connection.close(close).await;
        })
}

/// Why and how the server ends a connection.
struct Close {
    code: u16,
    reason: String,
}

impl Close {
    fn new(code: u16, reason: impl Into<String>) -> Close {
        Close {
            code,
            reason: reason.into(),
        }
    }

    fn invalid(reason: impl std::fmt::Display) -> Close {
        Close::new(4400, format!("Invalid message received: {reason}"))
    }
}

/// Something the operation streams produce for the client.
type Outgoing = Value;

struct Connection {
    app: AppState,
    schema: FormsSchema,
    socket: WebSocket,
    protocol: Protocol,
    key: Option<AuthenticatedKey>,
    init_received: bool,
    operations: StreamMap<String, BoxStream<'static, Outgoing>>,
}

/// What to do after a client message.
enum Step {
    Continue,
    Close(Close),
}

impl Connection {
    /// Runs the connection until it must close; returns how.
    async fn serve(&mut self) -> Close {
        let init_deadline = tokio::time::sleep(INIT_TIMEOUT);
        tokio::pin!(init_deadline);
        let mut closing = self.app.events.closing();
        let mut revoked: Option<tokio::sync::watch::Receiver<bool>> = None;
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                incoming = self.socket.recv() => {
                    let message = match incoming {
                        Some(Ok(message)) => message,
                        // The client went away: nothing to send.
                        Some(Err(_)) | None => return Close::new(1000, ""),
                    };
                    let step = match message {
                        Message::Text(text) => self.on_text(text.as_str()).await,
                        Message::Binary(_) => Step::Close(Close::invalid("binary frames are not part of the protocol")),
                        Message::Close(_) => return Close::new(1000, ""),
                        Message::Ping(_) | Message::Pong(_) => Step::Continue,
                    };
                    if let Step::Close(close) = step {
                        return close;
                    }
                    if revoked.is_none() {
                        if let Some(key) = &self.key {
                            revoked = Some(self.app.revocations.watch(key));
                        }
                    }
                }
                Some((_, outgoing)) = self.operations.next(), if !self.operations.is_empty() => {
                    if self.send(&outgoing).await.is_err() {
                        return Close::new(1000, "");
                    }
                }
                _ = &mut init_deadline, if !self.init_received => {
                    return Close::new(4408, "Connection initialisation timeout");
                }
                _ = keep_alive.tick(), if self.protocol == Protocol::LegacyWs && self.key.is_some() => {
                    if self.send(&json!({ "type": "ka" })).await.is_err() {
                        return Close::new(1000, "");
                    }
                }
                changed = wait_for_true(revoked.as_mut()) => {
                    if changed {
                        return Close::new(4403, "Forbidden: the key was revoked");
                    }
                }
                _ = closing.changed() => {
                    return Close::new(1001, "The server is shutting down");
                }
            }
        }
    }

    async fn send(&mut self, message: &Value) -> Result<(), axum::Error> {
        self.socket
            .send(Message::Text(message.to_string().into()))
            .await
    }

    async fn close(mut self, close: Close) {
        // The code only: some reasons quote what the client sent.
        tracing::info!(code = close.code, "subscription connection closed");
        let _ = self
            .socket
            .send(Message::Close(Some(CloseFrame {
                code: close.code,
                reason: close.reason.into(),
            })))
            .await;
    }

    async fn on_text(&mut self, text: &str) -> Step {
        let Ok(Value::Object(message)) = serde_json::from_str::<Value>(text) else {
            return Step::Close(Close::invalid("not a JSON object"));
        };
        let Some(Value::String(kind)) = message.get("type") else {
            return Step::Close(Close::invalid("no type"));
        };
        match (self.protocol, kind.as_str()) {
            (_, "connection_init") => self.on_init(&message).await,
            (Protocol::TransportWs, "ping") => {
                let mut pong = Map::new();
                pong.insert("type".into(), json!("pong"));
                if let Some(payload) = message.get("payload").filter(|p| p.is_object()) {
                    pong.insert("payload".into(), payload.clone());
                }
                match self.send(&Value::Object(pong)).await {
                    Ok(()) => Step::Continue,
                    Err(_) => Step::Close(Close::new(1000, "")),
                }
            }
            (Protocol::TransportWs, "pong") => Step::Continue,
            (Protocol::TransportWs, "subscribe") | (Protocol::LegacyWs, "start") => {
                self.on_subscribe(&message)
            }
            (Protocol::TransportWs, "complete") | (Protocol::LegacyWs, "stop") => {
                match message.get("id") {
                    Some(Value::String(id)) => {
                        self.operations.remove(id.as_str());
                        Step::Continue
                    }
                    _ => Step::Close(Close::invalid("an operation id is required")),
                }
            }
            (Protocol::LegacyWs, "connection_terminate") => Step::Close(Close::new(1000, "")),
            (_, other) => Step::Close(Close::invalid(format!(
                "unknown message type {other:?} for {}",
                self.protocol.name()
            ))),
        }
    }

    async fn on_init(&mut self, message: &Map<String, Value>) -> Step {
        if self.init_received {
            return Step::Close(Close::new(4429, "Too many initialisation requests"));
        }
        self.init_received = true;
        let payload = match message.get("payload") {
            None | Some(Value::Null) => None,
            Some(Value::Object(payload)) => Some(payload),
            Some(_) => return Step::Close(Close::invalid("the payload must be an object")),
        };
        // `Authorization: Bearer hym_live_…`, the header name in any case.
        let authorization = payload.and_then(|payload| {
            payload
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
                .and_then(|(_, value)| value.as_str())
        });
        let authenticated = match auth::bearer_credential(authorization) {
            Ok(credential) => {
                auth::authenticate_key(&self.app.pool, credential, self.app.clock.now()).await
            }
            Err(error) => Err(error),
        };
        match authenticated {
            Ok(key) => {
                self.key = Some(key);
                let ack = self.send(&json!({ "type": "connection_ack" })).await;
                let ka = match (ack, self.protocol) {
                    (Ok(()), Protocol::LegacyWs) => self.send(&json!({ "type": "ka" })).await,
                    (ack, _) => ack,
                };
                match ka {
                    Ok(()) => Step::Continue,
                    Err(_) => Step::Close(Close::new(1000, "")),
                }
            }
            Err(error @ (ApiError::AuthenticationRequired | ApiError::InvalidApiKey)) => {
                if self.protocol == Protocol::LegacyWs {
                    let _ = self
                        .send(&json!({ "type": "connection_error", "payload": { "message": error.to_string() } }))
                        .await;
                }
                Step::Close(Close::new(4403, "Forbidden"))
            }
            Err(error) => {
                // Logged (by kind only) through the one catalogue.
                let _ = async_graphql::ErrorExtensions::extend(&error);
                Step::Close(Close::new(4500, "Internal error: storage unavailable"))
            }
        }
    }

    fn on_subscribe(&mut self, message: &Map<String, Value>) -> Step {
        if self.key.is_none() {
            return Step::Close(Close::new(4401, "Unauthorized"));
        }
        let Some(Value::String(id)) = message.get("id") else {
            return Step::Close(Close::invalid("an operation id is required"));
        };
        let request = match parse_payload(message.get("payload")) {
            Ok(request) => request,
            Err(reason) => return Step::Close(Close::invalid(reason)),
        };
        if self.operations.contains_key(id.as_str()) {
            return Step::Close(Close::new(
                4409,
                format!("Subscriber for {id} already exists"),
            ));
        }
        let protocol = self.protocol;
        if self.operations.len() >= MAX_OPERATIONS {
            let refusal = error_message(
                id,
                json!([{ "message": format!("at most {MAX_OPERATIONS} operations can run on one connection") }]),
            );
            self.operations
                .insert(id.clone(), stream::once(async move { refusal }).boxed());
            return Step::Continue;
        }
        let key = self.key.clone();
        let request = request.data(key).data(Loaders::uncached(&self.app));
        let operation_id = id.clone();
        let complete = json!({ "type": "complete", "id": id });
        let messages = self
            .schema
            .execute_stream(request)
            .enumerate()
            .map(move |(index, response)| to_message(protocol, &operation_id, index, response))
            .chain(stream::once(async move { complete }))
            // An `error` ends the operation: nothing follows it, not even `complete`.
            .scan(false, |ended, message| {
                if *ended {
                    return futures_util::future::ready(None);
                }
                *ended = message["type"] == "error";
                futures_util::future::ready(Some(message))
            });
        self.operations.insert(id.clone(), messages.boxed());
        Step::Continue
    }
}

/// Resolves with `true` once the watched value turns true; never if there is none.
async fn wait_for_true(watch: Option<&mut tokio::sync::watch::Receiver<bool>>) -> bool {
    match watch {
        Some(watch) => watch.wait_for(|value| *value).await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The response as the protocol's message: `error` for a request error (the document did
/// not parse or validate, so no error has a path), `next` (legacy: `data`) otherwise.
fn to_message(protocol: Protocol, id: &str, index: usize, response: GraphqlResponse) -> Value {
    let request_error = index == 0
        && !response.errors.is_empty()
        && response.errors.iter().all(|error| error.path.is_empty())
        && response.data == async_graphql::Value::Null;
    if request_error {
        let errors = serde_json::to_value(&response.errors).unwrap_or_else(|_| json!([]));
        return error_message(id, errors);
    }
    let payload = serde_json::to_value(&response).unwrap_or_else(
        |_| json!({ "errors": [{ "message": "the response could not be encoded" }] }),
    );
    let kind = match protocol {
        Protocol::TransportWs => "next",
        Protocol::LegacyWs => "data",
    };
    json!({ "type": kind, "id": id, "payload": payload })
}

fn error_message(id: &str, errors: Value) -> Value {
    json!({ "type": "error", "id": id, "payload": errors })
}

/// `{query, operationName?, variables?, extensions?}` as a GraphQL request.
fn parse_payload(payload: Option<&Value>) -> Result<async_graphql::Request, &'static str> {
    let Some(Value::Object(payload)) = payload else {
        return Err("the payload must be an object");
    };
    let Some(Value::String(query)) = payload.get("query") else {
        return Err("the payload needs a query string");
    };
    let mut request = async_graphql::Request::new(query.clone());
    match payload.get("operationName") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) => request = request.operation_name(name.clone()),
        Some(_) => return Err("operationName must be a string"),
    }
    match payload.get("variables") {
        None | Some(Value::Null) => {}
        Some(variables @ Value::Object(_)) => {
            request = request.variables(async_graphql::Variables::from_json(variables.clone()))
        }
        Some(_) => return Err("variables must be an object"),
    }
    match payload.get("extensions") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(_) => return Err("extensions must be an object"),
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                axum::http::header::SEC_WEBSOCKET_PROTOCOL,
                HeaderValue::from_str(value).expect("header"),
            );
        }
        headers
    }

    #[test]
    fn the_clients_first_known_subprotocol_wins() {
        assert_eq!(
            negotiate(&offered(&["graphql-transport-ws, graphql-ws"])),
            Some(Protocol::TransportWs)
        );
        assert_eq!(
            negotiate(&offered(&["graphql-ws, graphql-transport-ws"])),
            Some(Protocol::LegacyWs)
        );
        assert_eq!(
            negotiate(&offered(&["soap", "graphql-ws"])),
            Some(Protocol::LegacyWs)
        );
        assert_eq!(negotiate(&offered(&["soap"])), None);
        assert_eq!(negotiate(&offered(&[])), None);
    }

    #[test]
    fn payloads_must_carry_a_query() {
        assert!(parse_payload(Some(&json!({ "query": "{ __typename }" }))).is_ok());
        assert!(parse_payload(Some(&json!({ "query": "{ a }", "variables": null }))).is_ok());
        assert!(parse_payload(None).is_err());
        assert!(parse_payload(Some(&json!([]))).is_err());
        assert!(parse_payload(Some(&json!({ "query": 1 }))).is_err());
        assert!(parse_payload(Some(&json!({ "query": "{ a }", "variables": [] }))).is_err());
        assert!(parse_payload(Some(&json!({ "query": "{ a }", "operationName": 3 }))).is_err());
    }
}
