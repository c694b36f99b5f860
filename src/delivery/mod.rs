//! Webhook delivery: the worker pool (`worker.rs`), the webhook HTTP client and its
//! resolver (`client.rs`, the only outbound HTTP), outcome classification and backoff
//! (`outcome.rs`), the payload and its signatures (`payload.rs`), the batched recording
//! of attempts (`recorder.rs`), pausing and resuming endpoints (`pausing.rs`), and intake's
//! way to hand the worker deliveries it claimed (`handoff.rs`), and sending one email over
//! SMTP with the notification it carries (`email.rs`).

pub mod client;
pub mod email;
pub mod handoff;
pub mod outcome;
pub mod pausing;
pub mod payload;
pub mod recorder;
pub mod worker;

pub use worker::Worker;
