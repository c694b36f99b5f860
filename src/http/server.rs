//! The HTTP server: hyper with a timer and limits, instead of `axum::serve`, which runs
//! hyper without a timer (so no header-read timeout), never closes an idle connection and
//! accepts without bound.
//!
//! - A request's head must arrive within `FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS` (hyper's
//!   own timer, also running while a kept-alive connection waits for its next request).
//! - A connection with no request in flight for `FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS` is
//!   closed. Over HTTP/1 a connection that has begun to send its next request's head is
//!   left to the header timeout; over HTTP/2 nothing but a request counts (pings, settings
//!   and window updates keep no connection open). So is one whose response has made no
//!   progress for `FORMS_HTTP_SEND_TIMEOUT_SECONDS` (a client that stopped reading).
//!   Bodies are read under their own deadline ([`super::read_body`]).
//! - At most `FORMS_HTTP_MAX_CONNECTIONS` connections are served at once (WebSockets
//!   included, for as long as they live); beyond it new ones wait in the listen backlog.
//!   One client address (an IPv6 /64) holds at most
//!   `FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS` of them; a connection past that is closed at
//!   once, so one client cannot take every place.
//!   The open-file limit is raised at start-up so that the connections, the database pool
//!   and the workers' outbound requests all fit.
//! - On shutdown the listener closes, idle connections close at once, requests in flight
//!   get `FORMS_SHUTDOWN_TIMEOUT_SECONDS` to finish, then whatever is left is dropped.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::config::Config;
use crate::telemetry::meters;

/// The server's limits, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub send_timeout: Duration,
    pub max_connections: usize,
    /// 0: no cap per address.
    pub max_connections_per_address: usize,
    pub shutdown_timeout: Duration,
}

impl Limits {
    pub fn from_config(config: &Config) -> Limits {
        Limits {
            header_read_timeout: config.http.header_read_timeout,
            keep_alive_timeout: config.http.keep_alive_timeout,
            send_timeout: config.http.send_timeout,
            max_connections: config.http.max_connections,
            max_connections_per_address: config.http.max_connections_per_address,
            shutdown_timeout: config.http.shutdown_timeout,
        }
    }
}

/// File descriptors kept for everything but client connections: the database pool, the
/// listener connection, exports, the workers' outbound requests, logs and libraries.
pub fn descriptor_reserve(config: &Config) -> u64 {
    256 + u64::from(config.database.pool_size)
        + 2 * config.worker.concurrency as u64
        + config.export_max_concurrent as u64
}

/// Raises the soft open-file limit to the hard one, and says how many client connections
/// fit beside `reserve` descriptors: the configured maximum, or fewer when the limit is
/// too low for it (with a warning naming the variable to lower or the limit to raise).
pub fn fit_connections(configured: usize, reserve: u64) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(error) => {
                tracing::warn!(%error, "cannot raise the open-file limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(error) => {
            tracing::warn!(%error, "cannot read the open-file limit");
            return configured;
        }
    };
    let room = usize::try_from(soft.saturating_sub(reserve)).unwrap_or(usize::MAX);
    if room < configured {
        tracing::warn!(
            open_file_limit = soft,
            configured,
            serving = room.max(1),
            "the open-file limit leaves room for fewer connections than FORMS_HTTP_MAX_CONNECTIONS; raise the limit (ulimit -n, LimitNOFILE=) or lower the setting"
        );
        return room.max(1);
    }
    configured
}

/// Serves `router` on `listener` until `shutdown` resolves, then shuts down gracefully
/// within the limits' deadline.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let addresses = AddressCounts::new(limits.max_connections_per_address);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.keep_alive_timeout)
        .keep_alive_timeout(limits.send_timeout);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors, or a connection reset before it was taken: the
                    // listener itself is fine. Pause briefly so a full table can drain.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Some(address_slot) = addresses.take(peer.ip()) else {
            // Closed at once: the client learns no more than a reset would tell it.
            meters::connection_refused_for_its_address();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::new(ConnectionState::new(permit, address_slot));
        let io = TokioIo::new(Watched {
            inner: stream,
            state: state.clone(),
        });
        let service = ConnectionService {
            router: router.clone(),
            peer,
            state: state.clone(),
        };
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            tokio::select! {
                _ = connection => {}
                reason = watchdog(&state, limits) => {
                    tracing::debug!(reason, "closed a connection");
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after FORMS_SHUTDOWN_TIMEOUT_SECONDS were dropped");
    }
}

/// The router for one connection: the peer address for `ConnectInfo`, and the count of
/// requests in flight that the watchdog reads.
#[derive(Clone)]
struct ConnectionService {
    router: Router,
    peer: SocketAddr,
    state: Arc<ConnectionState>,
}

type ResponseFuture =
    Pin<Box<dyn std::future::Future<Output = Result<hyper::Response<Body>, Infallible>> + Send>>;

impl hyper::service::Service<hyper::Request<Incoming>> for ConnectionService {
    type Response = hyper::Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: hyper::Request<Incoming>) -> ResponseFuture {
        let router = self.router.clone();
        let state = self.state.clone();
        let peer = self.peer;
        let guard = RequestGuard::new(state.clone());
        Box::pin(async move {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(peer));
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(infallible) => match infallible {},
            };
            if response.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
                state.upgraded.store(true, Ordering::SeqCst);
            }
            // The request stays in flight until its whole body has been sent.
            Ok(response.map(|body| {
                Body::new(GuardedBody {
                    inner: body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// What the watchdog knows of one connection.
struct ConnectionState {
    opened: Instant,
    /// Requests whose response has not been sent completely.
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` when the connection last became idle.
    idle_since: AtomicU64,
    /// Whether anything was received since then (the head of a next request, say).
    received_since_idle: AtomicBool,
    /// Milliseconds after `opened` (plus one) since when a write has been waiting for the
    /// client; zero while writes go through.
    write_blocked_since: AtomicU64,
    /// A WebSocket took the connection over: it manages its own lifetime.
    upgraded: AtomicBool,
    /// The client opened with HTTP/2's preface: bytes received are no sign of a request.
    http2: AtomicBool,
    /// The first bytes received, until there are enough to tell the protocol by.
    opening: std::sync::Mutex<Vec<u8>>,
    /// The connection's place under `FORMS_HTTP_MAX_CONNECTIONS`, held as long as the
    /// socket lives (an upgraded connection's socket outlives hyper's connection).
    _slot: OwnedSemaphorePermit,
    /// Its place among its address's connections, held as long.
    _address_slot: AddressSlot,
}

/// What an HTTP/2 client sends first (RFC 9113 3.4); no HTTP/1 request starts so.
const HTTP2_PREFACE_START: &[u8] = b"PRI * HTTP/2.0";

impl ConnectionState {
    fn new(slot: OwnedSemaphorePermit, address_slot: AddressSlot) -> ConnectionState {
        ConnectionState {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            received_since_idle: AtomicBool::new(false),
            write_blocked_since: AtomicU64::new(0),
            upgraded: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            opening: std::sync::Mutex::new(Vec::new()),
            _slot: slot,
            _address_slot: address_slot,
        }
    }

    /// Notes the first bytes of the connection until the protocol is known.
    fn note_opening(&self, received: &[u8]) {
        let mut opening = self
            .opening
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if opening.len() >= HTTP2_PREFACE_START.len() {
            return;
        }
        let wanted = HTTP2_PREFACE_START.len() - opening.len();
        opening.extend_from_slice(&received[..received.len().min(wanted)]);
        if opening.len() == HTTP2_PREFACE_START.len() && opening[..] == *HTTP2_PREFACE_START {
            self.http2.store(true, Ordering::SeqCst);
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Counts a request in flight until its response body is gone.
struct RequestGuard(Arc<ConnectionState>);

impl RequestGuard {
    fn new(state: Arc<ConnectionState>) -> RequestGuard {
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        RequestGuard(state)
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let state = &self.0;
        if state.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            state.received_since_idle.store(false, Ordering::SeqCst);
            state.idle_since.store(state.elapsed_ms(), Ordering::SeqCst);
        }
    }
}

/// A response body that keeps its request counted in flight.
struct GuardedBody {
    inner: Body,
    _guard: RequestGuard,
}

impl http_body::Body for GuardedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Resolves when the connection must be closed, naming why; never for an upgraded one.
async fn watchdog(state: &ConnectionState, limits: Limits) -> &'static str {
    let keep_alive = u64::try_from(limits.keep_alive_timeout.as_millis()).unwrap_or(u64::MAX);
    let send = u64::try_from(limits.send_timeout.as_millis()).unwrap_or(u64::MAX);
    let tick =
        (limits.keep_alive_timeout.min(limits.send_timeout) / 4).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(tick).await;
        if state.upgraded.load(Ordering::SeqCst) {
            return std::future::pending().await;
        }
        let now = state.elapsed_ms();
        // Over HTTP/2 a request in progress is always in flight (its stream is handed to
        // the service as soon as its headers arrive): whatever else arrives (pings,
        // settings) is no request.
        let idle = state.in_flight.load(Ordering::SeqCst) == 0
            && (state.http2.load(Ordering::SeqCst)
                || !state.received_since_idle.load(Ordering::SeqCst));
        if idle && now.saturating_sub(state.idle_since.load(Ordering::SeqCst)) >= keep_alive {
            return "idle past the keep-alive timeout";
        }
        let blocked = state.write_blocked_since.load(Ordering::SeqCst);
        if blocked > 0 && now.saturating_sub(blocked - 1) >= send {
            return "the client stopped reading its response";
        }
    }
}

/// The socket, telling the watchdog what it sees.
struct Watched<T> {
    inner: T,
    state: Arc<ConnectionState>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.received_since_idle.store(true, Ordering::SeqCst);
            self.state.note_opening(&buf.filled()[before..]);
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> Watched<T> {
    fn note_write<R>(&self, result: &Poll<std::io::Result<R>>) {
        match result {
            Poll::Pending => {
                let now = self.state.elapsed_ms() + 1;
                let _ = self.state.write_blocked_since.compare_exchange(
                    0,
                    now,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
            Poll::Ready(_) => self.state.write_blocked_since.store(0, Ordering::SeqCst),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(&result);
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_write(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        self.note_write(&result);
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Connections open per client address, for `FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS`.
#[derive(Clone)]
struct AddressCounts {
    cap: usize,
    open: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection's place among its address's; given back when dropped.
struct AddressSlot {
    counts: Option<(AddressCounts, IpAddr)>,
}

impl AddressCounts {
    fn new(cap: usize) -> AddressCounts {
        AddressCounts {
            cap,
            open: Arc::default(),
        }
    }

    /// A place for a connection from `peer`, or `None` when its address holds the cap.
    fn take(&self, peer: IpAddr) -> Option<AddressSlot> {
        if self.cap == 0 {
            return Some(AddressSlot { counts: None });
        }
        let key = address_key(peer);
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(key).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            counts: Some((self.clone(), key)),
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let Some((counts, key)) = &self.counts else {
            return;
        };
        let mut open = counts
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                open.remove(key);
            }
        }
    }
}

/// The address a cap counts by: an IPv4 address (also when it arrives IPv4-mapped), or an
/// IPv6 address's /64, which one client is usually given whole.
fn address_key(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let segments = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(
                    segments[0],
                    segments[1],
                    segments[2],
                    segments[3],
                    0,
                    0,
                    0,
                    0,
                ))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_holds_at_most_its_cap_and_gets_places_back() {
        let counts = AddressCounts::new(2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = counts.take(a).expect("first");
        let _second = counts.take(a).expect("second");
        assert!(counts.take(a).is_none(), "third refused");
        assert!(counts.take(b).is_some(), "another address is not affected");
        drop(first);
        assert!(counts.take(a).is_some(), "a place given back is free again");
        assert!(AddressCounts::new(0).take(a).is_some());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let other: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(address_key(one), address_key(other));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(address_key(mapped), "192.0.2.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_http2_preface_is_recognised_however_it_is_split() {
        let counts = AddressCounts::new(0);
        let slot = || counts.take("127.0.0.1".parse().unwrap()).expect("uncapped");
        let permit = || {
            Arc::new(Semaphore::new(1))
                .try_acquire_owned()
                .expect("free")
        };
        let state = ConnectionState::new(permit(), slot());
        state.note_opening(b"PRI * HT");
        state.note_opening(b"TP/2.0\r\n\r\nSM\r\n\r\n");
        assert!(state.http2.load(Ordering::SeqCst));
        let state = ConnectionState::new(permit(), slot());
        state.note_opening(b"POST /f/contact HTTP/1.1\r\n");
        assert!(!state.http2.load(Ordering::SeqCst));
    }
}
