//! What every test binary shares. `browser`: headless Chromium over WebDriver, and the
//! console's sign-in; `harness`: a throwaway PostgreSQL cluster per run, a
//! database per test cloned from a migrated template, the app in-process or as `serve`
//! processes; `receiver`: a webhook receiver on loopback that records what it got;
//! `smtp_server`: a real SMTP server (aiosmtpd) that keeps the mail; `ws_client`: GraphQL
//! over WebSocket, in Rust and through the reference `graphql-ws` client; `proxy`: a TCP
//! proxy on loopback that can cut or stall a connection.

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

pub mod browser;
pub mod harness;
pub mod proxy;
pub mod receiver;
pub mod smtp_server;
pub mod ws_client;
