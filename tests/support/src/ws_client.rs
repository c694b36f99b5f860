//! A raw WebSocket client for `/graphql/ws`: frames in, frames out, close codes seen.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

pub struct WsClient {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    /// The subprotocol the server chose.
    pub protocol: Option<String>,
}

/// What the server sent next.
#[derive(Debug)]
pub enum Frame {
    Json(Value),
    Closed { code: u16, reason: String },
}

impl WsClient {
    /// Connects offering `protocols` in one `Sec-WebSocket-Protocol` header, in order.
    pub async fn connect(url: &str, protocols: &str) -> WsClient {
        let mut request = url.into_client_request().expect("ws request");
        if !protocols.is_empty() {
            request.headers_mut().insert(
                "sec-websocket-protocol",
                protocols.parse().expect("header value"),
            );
        }
        let (socket, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("websocket connects");
        let protocol = response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        WsClient { socket, protocol }
    }

    /// `graphql-transport-ws`, initialised with `key` and acknowledged.
    pub async fn ready(url: &str, key: &str) -> WsClient {
        let mut client = WsClient::connect(url, "graphql-transport-ws").await;
        client.init(key).await;
        let ack = client.next_json().await;
        assert_eq!(ack["type"], "connection_ack", "{ack}");
        client
    }

    pub async fn init(&mut self, key: &str) {
        self.send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {key}") } }))
            .await;
    }

    pub async fn send(&mut self, message: Value) {
        self.send_text(&message.to_string()).await;
    }

    pub async fn send_text(&mut self, text: &str) {
        self.socket
            .send(Message::Text(text.to_string().into()))
            .await
            .expect("send");
    }

    /// Subscribes to `deliveryStateChanged` with `arguments` (GraphQL argument text).
    pub async fn subscribe_events(&mut self, id: &str, arguments: &str) {
        let arguments = if arguments.is_empty() {
            String::new()
        } else {
            format!("({arguments})")
        };
        self.send(json!({
            "type": "subscribe",
            "id": id,
            "payload": { "query": format!(
                "subscription {{ deliveryStateChanged{arguments} {{ id kind state previousState attempts cycleAttempts outcome occurredAt endpointId delivery {{ id state }} }} }}"
            ) },
        }))
        .await;
    }

    /// The next frame within `wait`, or `None`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Frame> {
        loop {
            let message = match tokio::time::timeout(wait, self.socket.next()).await {
                Err(_) => return None,
                Ok(None) => {
                    return Some(Frame::Closed {
                        code: 0,
                        reason: "ended without a close frame".into(),
                    })
                }
                Ok(Some(Err(error))) => {
                    return Some(Frame::Closed {
                        code: 0,
                        reason: error.to_string(),
                    })
                }
                Ok(Some(Ok(message))) => message,
            };
            match message {
                Message::Text(text) => {
                    return Some(Frame::Json(
                        serde_json::from_str(text.as_str()).expect("server sends JSON"),
                    ))
                }
                Message::Close(frame) => {
                    return Some(Frame::Closed {
                        code: frame.as_ref().map_or(0, |frame| u16::from(frame.code)),
                        reason: frame
                            .map(|frame| frame.reason.to_string())
                            .unwrap_or_default(),
                    })
                }
                _ => continue,
            }
        }
    }

    pub async fn next_json(&mut self) -> Value {
        match self.next_within(Duration::from_secs(10)).await {
            Some(Frame::Json(value)) => value,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// The next `ka`-free message (the legacy protocol sends keep-alives).
    pub async fn next_non_ka(&mut self) -> Value {
        loop {
            let message = self.next_json().await;
            if message["type"] != "ka" {
                return message;
            }
        }
    }

    /// Waits for the server to close; returns the code and reason.
    pub async fn closed(&mut self, wait: Duration) -> (u16, String) {
        loop {
            match self.next_within(wait).await {
                Some(Frame::Closed { code, reason }) => return (code, reason),
                Some(Frame::Json(value)) if value["type"] == "ka" => continue,
                other => panic!("expected a close, got {other:?}"),
            }
        }
    }

    /// The next `next` payload's event for operation `id`.
    pub async fn next_event(&mut self, id: &str) -> Value {
        let message = self.next_json().await;
        assert_eq!(message["type"], "next", "{message}");
        assert_eq!(message["id"], id, "{message}");
        assert!(message["payload"]["errors"].is_null(), "{message}");
        message["payload"]["data"]["deliveryStateChanged"].clone()
    }

    /// `count` events of operation `id`.
    pub async fn events(&mut self, id: &str, count: usize) -> Vec<Value> {
        let mut events = Vec::with_capacity(count);
        while events.len() < count {
            events.push(self.next_event(id).await);
        }
        events
    }

    /// Asserts nothing arrives within `wait`.
    /// Reads and drops frames until none arrives within `wait` (at most 1,000).
    pub async fn drain(&mut self, wait: Duration) {
        for _ in 0..1000 {
            if self.next_within(wait).await.is_none() {
                return;
            }
        }
        panic!("frames kept coming");
    }

    pub async fn quiet_for(&mut self, wait: Duration) {
        if let Some(frame) = self.next_within(wait).await {
            panic!("expected nothing, got {frame:?}");
        }
    }

    pub async fn close(mut self) {
        let _ = self
            .socket
            .close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            }))
            .await;
    }
}

/// The event's (state, previous state, kind) as plain strings.
pub fn transition(event: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or("null").to_string();
    (
        text(&event["state"]),
        text(&event["previousState"]),
        text(&event["kind"]),
    )
}

/// A (state, previous state, kind) to compare with [`transition`].
pub fn expected(state: &str, previous: &str, kind: &str) -> (String, String, String) {
    (state.into(), previous.into(), kind.into())
}

pub fn event_id(event: &Value) -> i64 {
    event["id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .expect("event ids are whole numbers")
}

/// The npm `graphql-ws` client, run by node (tests/graphql-ws-client/subscribe.mjs): one
/// subscription, its messages read back as JSON lines.
pub struct NodeSubscriber {
    _child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

/// Installs the client's npm packages once per test run.
fn node_client_dir() -> std::path::PathBuf {
    static INSTALLED: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| crate::harness::npm_installed("graphql-ws-client", &["graphql-ws"]))
        .clone()
}

impl NodeSubscriber {
    pub async fn start(url: &str, key: &str, query: &str, variables: Value) -> NodeSubscriber {
        use tokio::io::AsyncBufReadExt;
        let dir = tokio::task::spawn_blocking(node_client_dir)
            .await
            .expect("npm install");
        let mut child = tokio::process::Command::new("node")
            .arg("subscribe.mjs")
            .current_dir(dir)
            .env("WS_URL", url)
            .env("WS_KEY", key)
            .env("WS_QUERY", query)
            .env("WS_VARIABLES", variables.to_string())
            .stdout(std::process::Stdio::piped())
            // Everything the tests read comes on stdout; the library's own dumps of the
            // close when the test's server goes away are noise.
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node is needed for the graphql-ws client tests");
        let stdout = child.stdout.take().expect("stdout");
        let mut subscriber = NodeSubscriber {
            _child: child,
            lines: tokio::io::BufReader::new(stdout).lines(),
        };
        let first = subscriber.next_message().await;
        assert_eq!(first, json!({ "connected": true }), "{first}");
        subscriber
    }

    pub async fn next_message(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("the graphql-ws client printed nothing for 30 s")
            .expect("read the client's output")
            .expect("the graphql-ws client exited");
        serde_json::from_str(&line).expect("the client prints JSON lines")
    }

    /// The next `deliveryStateChanged` event.
    pub async fn next_event(&mut self) -> Value {
        let message = self.next_message().await;
        assert!(
            message["next"]["errors"].is_null() && !message["next"].is_null(),
            "{message}"
        );
        message["next"]["data"]["deliveryStateChanged"].clone()
    }
}
