//! The fault suite: guarantees shown under faults with real processes, a real database
//! stopped and started, hostile peers on loopback, and a soak. Each test is bounded in
//! count and time and stops by itself. `cargo test` runs the short configuration;
//! `FORMS_FAULTS=long` (and `FORMS_SOAK_SECONDS`) the long one (docs/RELIABILITY.md).

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

mod peers;
mod probe;

mod chaos;
mod clients;
mod failover;
mod outage;
mod receivers;
mod resume;
mod soak;

/// Whether the long configuration was asked for.
pub fn long() -> bool {
    std::env::var("FORMS_FAULTS").is_ok_and(|value| value == "long")
}
