//! A real local HTTP receiver for webhook tests: records every request it gets (headers,
//! exact body bytes, when it arrived) and answers by path:
//! - `/status/{code}`: that status (3xx with a `Location` to `/landing`);
//! - `/hang`: never answers while `hanging` is set, then 200;
//! - `/slow/{ms}`: 200 after that many milliseconds (the most of these in progress at once
//!   is kept, `most_slow_at_once`);
//! - `/failing`: 500 while `failing` is set, then 200;
//! - `/gone`: 410 while `gone` is set, then 200;
//! - anything else: 200.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone, Default)]
pub struct Receiver {
    pub addr: Option<SocketAddr>,
    pub requests: Arc<Mutex<Vec<Received>>>,
    pub hanging: Arc<AtomicBool>,
    pub failing: Arc<AtomicBool>,
    pub gone: Arc<AtomicBool>,
    slow_now: Arc<AtomicUsize>,
    slow_most: Arc<AtomicUsize>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let mut receiver = Receiver::default();
        receiver.hanging.store(true, Ordering::SeqCst);
        receiver.failing.store(true, Ordering::SeqCst);
        receiver.gone.store(true, Ordering::SeqCst);
        let router = Router::new()
            .route("/status/{code}", any(status))
            .route("/hang", any(hang))
            .route("/slow/{ms}", any(slow))
            .route("/failing", any(failing))
            .route("/gone", any(gone))
            .fallback(any(ok))
            .layer(axum::middleware::from_fn_with_state(
                receiver.clone(),
                remember,
            ))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        receiver.addr = Some(listener.local_addr().expect("receiver address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        receiver
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr.expect("started"))
    }

    pub fn port(&self) -> u16 {
        self.addr.expect("started").port()
    }

    pub fn received(&self) -> Vec<Received> {
        self.requests.lock().expect("receiver lock").clone()
    }

    /// The most `/slow/{ms}` requests that were in progress at once.
    pub fn most_slow_at_once(&self) -> usize {
        self.slow_most.load(Ordering::SeqCst)
    }

    pub fn stop_hanging(&self) {
        self.hanging.store(false, Ordering::SeqCst);
    }

    /// Waits until at least `count` requests arrived (at most 60 s).
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {count} requests arrived",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `status` while `flag` is set, then 200.
fn switched(flag: &AtomicBool, status: StatusCode) -> StatusCode {
    if flag.load(Ordering::SeqCst) {
        status
    } else {
        StatusCode::OK
    }
}

async fn failing(State(receiver): State<Receiver>) -> StatusCode {
    switched(&receiver.failing, StatusCode::INTERNAL_SERVER_ERROR)
}

async fn gone(State(receiver): State<Receiver>) -> StatusCode {
    switched(&receiver.gone, StatusCode::GONE)
}

/// Keeps every request, whatever its path, before the route answers it: the exact body
/// bytes are read here and handed on unchanged.
async fn remember(State(receiver): State<Receiver>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("request body");
    receiver
        .requests
        .lock()
        .expect("receiver lock")
        .push(Received {
            path: parts.uri.path().to_string(),
            headers: parts.headers.clone(),
            body: body.clone(),
        });
    next.run(Request::from_parts(parts, Body::from(body))).await
}

async fn status(Path(code): Path<u16>) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT);
    if status.is_redirection() {
        return (status, [("location", "/landing")], "moved").into_response();
    }
    (status, "a response body that must never be stored").into_response()
}

async fn hang(State(receiver): State<Receiver>) -> StatusCode {
    while receiver.hanging.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    StatusCode::OK
}

async fn slow(State(receiver): State<Receiver>, Path(ms): Path<u64>) -> StatusCode {
    let now = receiver.slow_now.fetch_add(1, Ordering::SeqCst) + 1;
    receiver.slow_most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    receiver.slow_now.fetch_sub(1, Ordering::SeqCst);
    StatusCode::OK
}

async fn ok() -> StatusCode {
    StatusCode::OK
}
