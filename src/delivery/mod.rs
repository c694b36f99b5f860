//! Delivery to destinations: the worker pool (`worker.rs`), a sender per destination kind
//! (`senders.rs`), a submission as a chat platform's message (`chat.rs`), the webhook HTTP client (`client.rs`, the only outbound HTTP to
//! receivers, through the resolver of `outbound.rs`), sending one email over SMTP with
//! the notification it carries (`email.rs`, the only outbound mail), outcome
//! classification and backoff (`outcome.rs`), the payload and its signatures
//! (`payload.rs`), the batched recording of attempts (`recorder.rs`), pausing and resuming
//! destinations (`pausing.rs`), and intake's way to hand the worker deliveries it claimed
//! (`handoff.rs`), and sending operator alerts (`alerts.rs`).

pub mod alerts;
pub mod chat;
pub mod client;
pub mod email;
pub mod handoff;
pub mod oauth;
pub mod outcome;
pub mod pausing;
pub mod payload;
pub mod recorder;
pub mod senders;
pub mod worker;

pub use senders::Senders;
pub use worker::Worker;
