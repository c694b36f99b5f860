//! The state every request handler and worker shares, behind one `Arc`.

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Config;
use crate::db::DbPool;

pub struct App {
    pub config: Config,
    pub pool: DbPool,
    pub clock: Arc<dyn Clock>,
}

pub type AppState = Arc<App>;

impl App {
    pub fn new(config: Config, pool: DbPool, clock: Arc<dyn Clock>) -> AppState {
        Arc::new(App {
            config,
            pool,
            clock,
        })
    }
}
