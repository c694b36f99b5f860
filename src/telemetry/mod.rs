//! What the process tells its operator: log lines (here), metrics ([`meters`]) and, when
//! asked for, traces ([`traces`]).
//!
//! Logs go to standard error. `RUST_LOG` picks the level (default `info`),
//! `FORMS_LOG_FORMAT` the shape: text (coloured only on a terminal) or one JSON object per
//! line with the keys `timestamp`, `level`, `target`, `message`, the event's own fields
//! (`delivery_id`, `submission_id`, `attempt`, …) and, inside a request, `span` with its
//! `request_id`, `method` and `route`. Lines carry ids, counts, states and error kinds;
//! never submitted values, keys, secrets, client addresses or response bodies.
//!
//! That holds at every level because only this service's own events follow `RUST_LOG`
//! all the way down: every other crate (the database driver, HTTP, TLS, mail, storage…)
//! is written at most at WARN, whatever `RUST_LOG` asks ([`ceiling`]). Their DEBUG and
//! TRACE lines are where they print what they carry: tokio-postgres, for one, prints
//! each statement's bind parameters (secrets, submitted values, addresses) at DEBUG.

pub mod meters;
pub mod traces;

use std::io::IsTerminal;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::{FilterExt, Targets};
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The target of this service's own events (and its modules', `hymical_forms::…`).
pub const OWN_TARGET: &str = env!("CARGO_CRATE_NAME");

/// The most any other crate may write, whatever `RUST_LOG` says: their warnings and
/// errors name what failed, never what was carried.
pub const DEPENDENCY_CEILING: LevelFilter = LevelFilter::WARN;

/// The second filter every event and span passes besides `RUST_LOG`'s: this service's
/// own at any level, everything else (events that came through the `log` crate too,
/// whose target is their module's) at most at [`DEPENDENCY_CEILING`]. Both must let a
/// line through, so no `RUST_LOG` (`trace`, `tokio_postgres=trace`,
/// `tokio_postgres::query=debug`…) can lift the ceiling. The spans exported as traces
/// ([`traces::TARGET`]) are never log lines: with traces off they are thus disabled
/// everywhere, at no cost.
pub fn ceiling() -> Targets {
    Targets::new()
        .with_default(DEPENDENCY_CEILING)
        .with_target(OWN_TARGET, LevelFilter::TRACE)
        .with_target(traces::TARGET, LevelFilter::OFF)
}

/// Installs the log and, when `traces` is given, the layer that exports spans.
pub fn init(format: LogFormat, traces: Option<&traces::Exporting>) {
    let rust_log = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Both filters on the one layer that writes: a line must pass each. (`And` also
    // hints the lower of their levels, so callsites above `RUST_LOG` stay off cheaply,
    // the `log` crate's records included.)
    let filter = rust_log.and(ceiling());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(traces.map(traces::Exporting::layer));
    // A second initialisation (tests) is harmless: the first subscriber stays.
    let _ = match format {
        LogFormat::Text => registry
            .with(
                layer
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_filter(filter),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                layer
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_filter(filter),
            )
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    /// Whether `ceiling` lets an event of `target` at `level` through.
    fn passes(target: &str, level: Level) -> bool {
        ceiling().would_enable(target, &level)
    }

    #[test]
    fn own_events_follow_rust_log_and_every_other_crate_stops_at_warn() {
        for level in [
            Level::TRACE,
            Level::DEBUG,
            Level::INFO,
            Level::WARN,
            Level::ERROR,
        ] {
            assert!(passes("hymical_forms", level));
            assert!(passes("hymical_forms::delivery::worker", level));
            assert!(passes("hymical_forms::request", level));
        }
        for target in [
            "tokio_postgres::query",
            "tokio_postgres",
            "diesel_async",
            "diesel",
            "bb8",
            "hyper",
            "hyper_util::client::legacy::pool",
            "h2::codec::framed_write",
            "reqwest::connect",
            "rustls::client::hs",
            "lettre::transport::smtp",
            "object_store::client::retry",
            "async_graphql",
            "tungstenite::protocol",
            "axum::serve",
            "tower_http::trace",
            "log",
        ] {
            assert!(!passes(target, Level::TRACE), "{target} at TRACE");
            assert!(!passes(target, Level::DEBUG), "{target} at DEBUG");
            assert!(!passes(target, Level::INFO), "{target} at INFO");
            assert!(passes(target, Level::WARN), "{target} at WARN");
            assert!(passes(target, Level::ERROR), "{target} at ERROR");
        }
    }
}
