//! `FORMS_BIND`, `FORMS_HTTP_*`, `FORMS_SHUTDOWN_TIMEOUT_SECONDS`: what clients of the HTTP
//! server may hold.

use std::net::SocketAddr;
use std::time::Duration;

use super::reader::Reader;

/// Limits on what clients of the HTTP server may hold.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub bind: SocketAddr,
    /// A request's head must arrive within this long of the connection being ready for it.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress for this long is closed (at most the
    /// header timeout), whatever else arrives on it (HTTP/2 pings, settings).
    pub keep_alive_timeout: Duration,
    /// A request's whole body must arrive within this long.
    pub body_read_timeout: Duration,
    /// A response (an export, say) that makes no progress for this long is abandoned.
    pub send_timeout: Duration,
    /// Connections served at once; beyond it new ones wait in the listen backlog.
    pub max_connections: usize,
    /// Connections one client address (an IPv6 /64) may hold at once; beyond it new ones
    /// are closed at once. 0: no such cap (behind a proxy every client shares its address).
    pub max_connections_per_address: usize,
    /// Bytes of request bodies held in memory at once, all requests together; a request
    /// whose body would pass it is refused with 503.
    pub max_buffered_body_bytes: usize,
    /// How long a stopping server waits for requests in flight.
    pub shutdown_timeout: Duration,
}

pub(super) fn read(r: &mut Reader) -> HttpConfig {
    let bind = r
        .socket_addr("FORMS_BIND")
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080)));
    let header_read_timeout = r.seconds("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", 10.0);
    let keep_alive_timeout = r.seconds("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", 5.0);
    let config = HttpConfig {
        bind,
        header_read_timeout,
        keep_alive_timeout,
        body_read_timeout: r.seconds("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", 30.0),
        send_timeout: r.seconds("FORMS_HTTP_SEND_TIMEOUT_SECONDS", 30.0),
        max_connections: r.integer("FORMS_HTTP_MAX_CONNECTIONS", 16_384, 1, 1_000_000) as usize,
        max_connections_per_address: r.integer(
            "FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS",
            1_024,
            0,
            1_000_000,
        ) as usize,
        max_buffered_body_bytes: r.integer(
            "FORMS_HTTP_MAX_BUFFERED_BODY_BYTES",
            64 << 20,
            1,
            1 << 40,
        ) as usize,
        shutdown_timeout: r.seconds("FORMS_SHUTDOWN_TIMEOUT_SECONDS", 30.0),
    };
    // The server waits for a next request head under the header timeout, so a longer
    // keep-alive could never take effect.
    if !r.failed(&[
        "FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS",
        "FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS",
    ]) && keep_alive_timeout > header_read_timeout
    {
        r.fail(
            "FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS",
            format!(
                "{} exceeds the header read timeout of {} seconds",
                keep_alive_timeout.as_secs_f64(),
                header_read_timeout.as_secs_f64()
            ),
            "at most FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS",
        );
    }
    config
}
