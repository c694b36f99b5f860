//! Integration tests against real PostgreSQL. One binary, so the whole run shares one
//! throwaway server (`support::harness`, tests/support).

// Tests stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

mod adoption;
mod claim_at_intake;
mod cli;
mod clock_skew;
mod console;
mod database_faults;
mod database_tls;
mod delivery;
mod delivery_fence;
mod delivery_processes;
mod destinations;
mod email;
mod embedded;
mod endpoint_cache;
mod endpoint_lifecycle;
mod export_retention;
mod fairness;
mod files;
mod foundation_http;
mod fuzz_seeds;
mod graphiql;
mod graphql_api;
mod graphql_audit;
mod graphql_limits;
mod graphql_paging;
mod group_commit;
mod http_limits;
mod input_errors;
mod intake;
mod intake_browser;
mod intake_idempotency;
mod intake_rate_limits;
mod intake_screening;
mod keys;
mod log_privacy;
mod metrics;
mod migrations;
mod module_graph;
mod operations;
mod ordering;
mod partitions;
mod pgbouncer;
mod projects;
mod receiver_credentials;
mod receiver_examples;
mod receivers;
mod recording_batches;
mod replicas;
mod schema_files;
mod search;
mod self_contained;
mod spam;
mod subscriptions;
mod subscriptions_e2e;
mod traces;
mod verifiers;
mod vocabulary;
mod webhook_standards;
