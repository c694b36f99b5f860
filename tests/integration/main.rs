//! Integration tests against real PostgreSQL. One binary, so the whole run shares one
//! throwaway server (see `harness`).

mod harness;

mod cli;
mod delivery;
mod delivery_fence;
mod delivery_processes;
mod embedded;
mod export_retention;
mod foundation_http;
mod graphql_api;
mod graphql_audit;
mod graphql_paging;
mod intake;
mod intake_browser;
mod intake_idempotency;
mod intake_rate_limits;
mod keys;
mod migrations;
mod receiver;
mod schema_files;
mod subscriptions;
mod subscriptions_e2e;
mod ws_client;
