//! Hymical Forms: a form backend that stores submissions in PostgreSQL and delivers them
//! as signed webhooks, managed through GraphQL. The layout is described in
//! docs/ARCHITECTURE.md.

mod app;
mod audit;
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
mod files;
mod graphql;
mod http;
mod intake;
mod model;
mod outbound;
mod pages;
mod postgres_url;
mod replica;
mod router;
mod services;
mod telemetry;
mod upkeep;

#[cfg(feature = "testing")]
pub mod testing;

/// mimalloc rather than the C library's allocator: a request allocates and frees many
/// small buffers on whichever runtime thread polls it, and under intake load glibc's
/// malloc and free were about a third of this process's CPU (docs/BENCHMARKS.md). Set
/// here so that the server, its tests and its benchmarks all run on the same allocator.
/// Built without transparent huge pages (`no_thp`): with them the allocator's regions are
/// backed in 2 MiB pages, and a streaming export's peak memory grew by 30 MB instead of 5.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub use cli::main;
