//! Hymical Forms: a form backend that stores submissions in PostgreSQL and delivers them
//! as signed webhooks, managed through GraphQL. The layout is described in
//! docs/ARCHITECTURE.md.

mod app;
mod auth;
mod cli;
mod clock;
mod config;
mod db;
mod delivery;
mod digest;
mod embedded;
mod error;
mod export;
mod feed;
mod graphql;
mod http;
mod intake;
mod model;
mod pages;
mod retention;
mod router;
mod services;
mod telemetry;

#[cfg(feature = "testing")]
pub mod testing;

pub use cli::main;
