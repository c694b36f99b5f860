//! The fault suite: guarantees shown under faults with real processes, a real database
//! stopped and started, hostile peers on loopback, and a soak. Each test is bounded in
//! count and time and stops by itself. `cargo test` runs the short configuration;
//! `FORMS_FAULTS=long` (and `FORMS_SOAK_SECONDS`) the long one (docs/RELIABILITY.md).

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

mod peers;
mod probe;

mod audit;
mod chaos;
mod clients;
mod failover;
mod ordering;
mod outage;
mod receivers;
mod resume;
mod soak;

/// Serving processes that deliver to hostile receivers and settle in seconds: no rate
/// limit, private targets allowed, one-second webhook timeouts, a three-second lease,
/// retries within a second and a two-second shutdown. Each test adds its own attempts.
pub const QUICK_DELIVERY: &[(&str, &str)] = &[
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1"),
    ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "1"),
    ("FORMS_WORKER_LEASE_SECONDS", "3"),
    ("FORMS_WORKER_POLL_SECONDS", "0.2"),
    ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "0.2"),
    ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "1"),
    ("FORMS_SHUTDOWN_TIMEOUT_SECONDS", "2"),
];

/// Whether the long configuration was asked for.
pub fn long() -> bool {
    std::env::var("FORMS_FAULTS").is_ok_and(|value| value == "long")
}
