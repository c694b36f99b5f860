//! The state every request handler and worker shares, behind one `Arc`.

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::{Config, Secret};
use crate::db::DbPool;

pub struct App {
    pub config: Config,
    /// For the connections that live outside the pool (the notification listener).
    pub database_url: Secret,
    pub pool: DbPool,
    pub clock: Arc<dyn Clock>,
}

pub type AppState = Arc<App>;

impl App {
    pub fn new(
        config: Config,
        database_url: Secret,
        pool: DbPool,
        clock: Arc<dyn Clock>,
    ) -> AppState {
        Arc::new(App {
            config,
            database_url,
            pool,
            clock,
        })
    }
}
