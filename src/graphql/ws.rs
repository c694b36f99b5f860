//! GraphQL subscriptions over WebSocket at `/graphql/ws` (docs/subscriptions.md), written for
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

use std::sync::Arc;
use std::time::Duration;

use async_graphql::http::WebSocketProtocols as Protocol;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use axum::Extension;
use futures_util::stream::{self, BoxStream};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio_stream::StreamMap;

use super::fanout::{self, Groups, Operation, Rendered};
use super::subscription::EventCursor;
use super::FormsSchema;
use crate::app::AppState;
use crate::auth::{self, AuthenticatedKey};
use crate::error::ApiError;
use crate::telemetry::meters;

/// A connection that has not sent `connection_init` by then is closed with 4408.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The legacy protocol's keep-alive (`ka`) interval.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// What a connection reads at most per read (see `upgrade`).
const READ_BUFFER_BYTES: usize = 4 * 1024;
/// Operations one connection may run at once.
pub const MAX_OPERATIONS: usize = 100;

/// The subprotocols spoken, as async-graphql names them: `GraphQLWS` is
/// `graphql-transport-ws`, `SubscriptionsTransportWS` the legacy `graphql-ws`.
const SPOKEN: [Protocol; 2] = [Protocol::GraphQLWS, Protocol::SubscriptionsTransportWS];

/// The first subprotocol the client offered that this server speaks, spelled exactly as
/// offered (the handshake fails in the client if the answer differs from its offer).
fn negotiate(headers: &HeaderMap) -> Option<Protocol> {
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .find_map(|offered| {
            SPOKEN
                .into_iter()
                .find(|spoken| spoken.sec_websocket_protocol() == offered)
        })
}

/// What `/graphql/ws` serves with: the schema, and the shared executions of this process.
#[derive(Clone)]
pub struct Subscriptions {
    schema: FormsSchema,
    groups: Arc<Groups>,
}

impl Subscriptions {
    pub fn new(schema: FormsSchema) -> Subscriptions {
        Subscriptions {
            schema,
            groups: Arc::new(Groups::default()),
        }
    }
}

pub async fn upgrade(
    State(app): State<AppState>,
    Extension(Subscriptions { schema, groups }): Extension<Subscriptions>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    mut upgrade: WebSocketUpgrade,
) -> Response {
    let protocol = negotiate(&headers);
    let address = crate::http::client_address(
        peer.ip(),
        &headers,
        app.config.rate_limit.trusted_proxy_hops,
    );
    if let Some(protocol) = protocol {
        upgrade.set_selected_protocol(HeaderValue::from_static(protocol.sec_websocket_protocol()));
    }
    upgrade
        .max_message_size(app.config.intake.max_body_bytes)
        // Clients send only small control messages. The WebSocket library zeroes a whole
        // read buffer's worth before every read attempt, and a connection tries one each
        // time it has written: at the default 128 KiB that zeroing was most of the server's
        // CPU per frame sent, and 128 MB of buffers per thousand dashboards. A larger
        // message still arrives whole (the buffer grows for it, up to the size limit).
        .read_buffer_size(READ_BUFFER_BYTES)
        .on_upgrade(move |socket| async move {
            let mut connection = Connection {
                app,
                schema,
                groups,
                socket,
                protocol: protocol.unwrap_or(Protocol::GraphQLWS),
                key: None,
                address,
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

/// A close frame's reason is at most 123 bytes (RFC 6455 5.5: a control frame's payload
/// is at most 125 bytes, two of them the code); a longer one makes the frame invalid and
/// the client sees 1006 instead of the code.
const MAX_CLOSE_REASON_BYTES: usize = 123;

impl Close {
    /// `reason` is cut to [`MAX_CLOSE_REASON_BYTES`] on a character boundary (it may quote
    /// a client's operation id of any length).
    fn new(code: u16, reason: impl Into<String>) -> Close {
        let mut reason = reason.into();
        if reason.len() > MAX_CLOSE_REASON_BYTES {
            let mut end = MAX_CLOSE_REASON_BYTES;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Close { code, reason }
    }

    fn invalid(reason: impl std::fmt::Display) -> Close {
        Close::new(4400, format!("Invalid message received: {reason}"))
    }
}

/// A frame's text, as the operation streams produce it.
type Outgoing = String;

/// Frames written before one flush, so a burst of results costs one write.
const FRAMES_PER_FLUSH: usize = 256;

struct Connection {
    app: AppState,
    schema: FormsSchema,
    groups: Arc<Groups>,
    socket: WebSocket,
    protocol: Protocol,
    key: Option<AuthenticatedKey>,
    /// The client's address (for the audit trail of its mutations).
    address: String,
    init_received: bool,
    operations: StreamMap<String, BoxStream<'static, Outgoing>>,
}

/// What to do after a client message.
enum Step {
    Continue,
    Close(Close),
}

/// A write failed, or did not finish within the send timeout: the connection is over.
struct SendFailed;

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
                    // A stopping server ends every subscription's stream too: what it last
                    // says (the feed is closing) is no result for the client, the close is.
                    if closing.has_changed().unwrap_or(true) {
                        return Close::new(1001, "The server is shutting down");
                    }
                    if self.send_ready(outgoing).await.is_err() {
                        return Close::new(1000, "");
                    }
                }
                _ = &mut init_deadline, if !self.init_received => {
                    return Close::new(4408, "Connection initialisation timeout");
                }
                _ = keep_alive.tick(), if self.protocol == Protocol::SubscriptionsTransportWS && self.key.is_some() => {
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

    async fn send(&mut self, message: &Value) -> Result<(), SendFailed> {
        let send_timeout = self.app.config.http.send_timeout;
        let sent = self.socket.send(Message::Text(message.to_string().into()));
        match tokio::time::timeout(send_timeout, sent).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(SendFailed),
        }
    }

    /// Writes `first` and whatever else the operations have ready, then flushes once.
    /// A client that stops reading cannot hold the connection (nor hide from revocation
    /// and shutdown behind a blocked write): the whole write must finish within the send
    /// timeout.
    async fn send_ready(&mut self, first: Outgoing) -> Result<(), SendFailed> {
        let send_timeout = self.app.config.http.send_timeout;
        let written = async {
            self.socket.feed(Message::Text(first.into())).await?;
            for _ in 1..FRAMES_PER_FLUSH {
                match self.operations.next().now_or_never() {
                    Some(Some((_, frame))) => self.socket.feed(Message::Text(frame.into())).await?,
                    _ => break,
                }
            }
            self.socket.flush().await
        };
        match tokio::time::timeout(send_timeout, written).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(SendFailed),
        }
    }

    async fn close(mut self, close: Close) {
        // The code only: some reasons quote what the client sent.
        tracing::info!(code = close.code, "subscription connection closed");
        let frame = self.socket.send(Message::Close(Some(CloseFrame {
            code: close.code,
            reason: close.reason.into(),
        })));
        // A client that does not read gets no close frame; the socket is dropped anyway.
        let _ = tokio::time::timeout(self.app.config.http.send_timeout, frame).await;
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
            (Protocol::GraphQLWS, "ping") => {
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
            (Protocol::GraphQLWS, "pong") => Step::Continue,
            (Protocol::GraphQLWS, "subscribe") | (Protocol::SubscriptionsTransportWS, "start") => {
                self.on_subscribe(&message).await
            }
            (Protocol::GraphQLWS, "complete") | (Protocol::SubscriptionsTransportWS, "stop") => {
                match message.get("id") {
                    Some(Value::String(id)) => {
                        self.operations.remove(id.as_str());
                        Step::Continue
                    }
                    _ => Step::Close(Close::invalid("an operation id is required")),
                }
            }
            (Protocol::SubscriptionsTransportWS, "connection_terminate") => {
                Step::Close(Close::new(1000, ""))
            }
            (_, other) => Step::Close(Close::invalid(format!(
                "unknown message type {other:?} for {}",
                self.protocol.sec_websocket_protocol()
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
        // `Hymical-Project: prj_…`, as over HTTP: one project's view for a key of every
        // project.
        // A member that is not a string names no project: refused as an unknown one.
        let project = payload.and_then(|payload| {
            payload
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(auth::PROJECT_HEADER))
                .map(|(_, value)| value.as_str().unwrap_or(""))
        });
        let authenticated = match auth::bearer_credential(authorization) {
            Ok(credential) => {
                let db = &self.app.graphql_db;
                match (
                    auth::authenticate_key(db, credential, self.app.clock.now()).await,
                    project,
                ) {
                    (Ok(key), Some(project)) => key.narrowed(db, project.trim()).await,
                    (authenticated, _) => authenticated,
                }
            }
            Err(error) => Err(error),
        };
        match authenticated {
            Ok(key) => {
                self.key = Some(key);
                let ack = self.send(&json!({ "type": "connection_ack" })).await;
                let ka = match (ack, self.protocol) {
                    (Ok(()), Protocol::SubscriptionsTransportWS) => {
                        self.send(&json!({ "type": "ka" })).await
                    }
                    (ack, _) => ack,
                };
                match ka {
                    Ok(()) => Step::Continue,
                    Err(_) => Step::Close(Close::new(1000, "")),
                }
            }
            Err(
                error @ (ApiError::AuthenticationRequired
                | ApiError::InvalidApiKey
                | ApiError::ProjectNotFound { .. }),
            ) => {
                if self.protocol == Protocol::SubscriptionsTransportWS {
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

    async fn on_subscribe(&mut self, message: &Map<String, Value>) -> Step {
        let Some(key) = self.key.clone() else {
            return Step::Close(Close::new(4401, "Unauthorized"));
        };
        let Some(Value::String(id)) = message.get("id") else {
            return Step::Close(Close::invalid("an operation id is required"));
        };
        let operation = match parse_payload(message.get("payload")) {
            Ok(operation) => operation,
            Err(reason) => return Step::Close(Close::invalid(reason)),
        };
        if self.operations.contains_key(id.as_str()) {
            return Step::Close(Close::new(
                4409,
                format!("Subscriber for {id} already exists"),
            ));
        }
        let protocol = self.protocol;
        // The document is parsed within one of GraphQL's operation places, as over HTTP:
        // parsing a large document is CPU work the place bounds.
        let admitted = match self.app.graphql_operations.acquire().await {
            Ok(_place) => super::cost::admit(&mut operation.request(), &self.app.config.graphql),
            Err(_) => return Step::Close(Close::new(1001, "The server is shutting down")),
        };
        let kind = match admitted {
            Ok(kind) => kind,
            Err(error) => {
                let frame = error_frame(id, &json!([error.graphql_json()]).to_string());
                self.operations
                    .insert(id.clone(), stream::once(async move { frame }).boxed());
                return Step::Continue;
            }
        };
        if kind == Some(async_graphql::parser::types::OperationType::Mutation) {
            if let Err(error) = key.require_admin() {
                let frame = error_frame(id, &json!([error.graphql_json()]).to_string());
                self.operations
                    .insert(id.clone(), stream::once(async move { frame }).boxed());
                return Step::Continue;
            }
        }
        if self.operations.len() >= MAX_OPERATIONS {
            let refusal = json!([{ "message": format!("at most {MAX_OPERATIONS} operations can run on one connection") }]);
            let frame = error_frame(id, &refusal.to_string());
            self.operations
                .insert(id.clone(), stream::once(async move { frame }).boxed());
            return Step::Continue;
        }
        let group_key = operation.group_key(key.view.as_ref());
        let make_request = {
            let (app, operation) = (self.app.clone(), operation.clone());
            let address = self.address.clone();
            move || {
                super::with_operation_data(
                    operation.request(),
                    kind,
                    &app,
                    key.clone(),
                    address.clone(),
                )
            }
        };
        let rendered = match group_key {
            Some(group_key) => {
                let membership = self
                    .groups
                    .join(group_key, &self.schema, make_request.clone());
                fanout::member_stream(membership, make_request, self.schema.clone()).boxed()
            }
            None => fanout::render(
                &self.schema,
                make_request(),
                Arc::new(EventCursor::default()),
            )
            .boxed(),
        };
        let operation_id = id.clone();
        let complete = complete_frame(id);
        let open = meters::open_subscription();
        let frames = rendered
            .map(move |item| {
                // Counted open for as long as the operation's stream lives.
                let _open = &open;
                match item {
                    Rendered::Result { payload, .. } => {
                        result_frame(protocol, &operation_id, &payload)
                    }
                    Rendered::RequestError(errors) => error_frame(&operation_id, &errors),
                }
            })
            .map(Some)
            .chain(stream::once(async move { Some(complete) }))
            // An `error` ends the operation: nothing follows it, not even `complete`.
            .scan(false, |ended, frame| {
                if *ended {
                    return futures_util::future::ready(None);
                }
                *ended = frame
                    .as_deref()
                    .is_some_and(|f| f.starts_with(r#"{"type":"error""#));
                futures_util::future::ready(frame)
            });
        self.operations.insert(id.clone(), frames.boxed());
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

/// A JSON string literal.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string is JSON")
}

/// A result: `next` (legacy: `data`) around the result rendered once for every member.
fn result_frame(protocol: Protocol, id: &str, payload: &str) -> String {
    let kind = match protocol {
        Protocol::GraphQLWS => "next",
        Protocol::SubscriptionsTransportWS => "data",
    };
    format!(
        r#"{{"type":"{kind}","id":{},"payload":{payload}}}"#,
        quoted(id)
    )
}

/// A request error: `error` with the errors (a JSON array).
fn error_frame(id: &str, errors: &str) -> String {
    format!(
        r#"{{"type":"error","id":{},"payload":{errors}}}"#,
        quoted(id)
    )
}

fn complete_frame(id: &str) -> String {
    format!(r#"{{"type":"complete","id":{}}}"#, quoted(id))
}

/// `{query, operationName?, variables?, extensions?}` as an operation.
fn parse_payload(payload: Option<&Value>) -> Result<Operation, &'static str> {
    let Some(Value::Object(payload)) = payload else {
        return Err("the payload must be an object");
    };
    let Some(Value::String(query)) = payload.get("query") else {
        return Err("the payload needs a query string");
    };
    let operation_name = match payload.get("operationName") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(_) => return Err("operationName must be a string"),
    };
    let variables = match payload.get("variables") {
        None | Some(Value::Null) => Value::Null,
        Some(variables @ Value::Object(_)) => variables.clone(),
        Some(_) => return Err("variables must be an object"),
    };
    match payload.get("extensions") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(_) => return Err("extensions must be an object"),
    }
    Ok(Operation {
        query: query.clone(),
        operation_name,
        variables,
    })
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
            Some(Protocol::GraphQLWS)
        );
        assert_eq!(
            negotiate(&offered(&["graphql-ws, graphql-transport-ws"])),
            Some(Protocol::SubscriptionsTransportWS)
        );
        assert_eq!(
            negotiate(&offered(&["soap", "graphql-ws"])),
            Some(Protocol::SubscriptionsTransportWS)
        );
        assert_eq!(negotiate(&offered(&["soap"])), None);
        assert_eq!(negotiate(&offered(&[])), None);
    }

    #[test]
    fn close_reasons_fit_a_close_frame() {
        let long = Close::new(
            4409,
            format!("Subscriber for {} already exists", "é".repeat(200)),
        );
        assert!(long.reason.len() <= MAX_CLOSE_REASON_BYTES);
        assert!(long.reason.starts_with("Subscriber for é"));
        assert_eq!(Close::new(4400, "short").reason, "short");
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
