//! What the process tells its operator: log lines (here) and metrics ([`meters`]).
//!
//! Logs go to standard error. `RUST_LOG` picks the level (default `info`),
//! `FORMS_LOG_FORMAT` the shape: text (coloured only on a terminal) or one JSON object per
//! line with the keys `timestamp`, `level`, `target`, `message`, the event's own fields
//! (`delivery_id`, `submission_id`, `attempt`, …) and, inside a request, `span` with its
//! `request_id`, `method` and `route`. Lines carry ids, counts, states and error kinds;
//! never submitted values, keys, secrets, client addresses or response bodies.

pub mod meters;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests) is harmless: the first subscriber stays.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
