//! Hymical Forms: a form backend that stores submissions in PostgreSQL and delivers them
//! as signed webhooks, managed through GraphQL.

pub mod app;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod db;
pub mod delivery;
pub mod digest;
pub mod error;
pub mod events;
pub mod export;
pub mod fuzzing;
pub mod graphql;
pub mod http;
pub mod ids;
pub mod intake;
pub mod retention;
pub mod telemetry;
