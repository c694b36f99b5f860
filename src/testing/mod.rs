//! What the integration tests, the benchmarks and the fuzz targets reach into: the
//! service's modules, re-exported under one roof behind the `testing` feature. Without the
//! feature the crate's public face is its entry point alone (`hymical_forms::main`).

pub mod fuzzing;

pub mod app {
    pub use crate::app::*;
}
pub mod auth {
    pub use crate::auth::*;
}
pub mod clock {
    pub use crate::clock::*;
}
pub mod config {
    pub use crate::config::*;
}
pub mod db {
    pub use crate::db::*;
}
pub mod delivery {
    pub use crate::delivery::*;
}
pub mod digest {
    pub use crate::digest::*;
}
pub mod embedded {
    pub use crate::embedded::*;
}
pub mod feed {
    pub use crate::feed::*;
}
pub mod files {
    pub use crate::files::*;
}
pub mod graphql {
    pub use crate::graphql::*;
}
pub mod http {
    pub use crate::http::*;
}
pub mod model {
    pub use crate::model::*;
}
pub mod outbound {
    pub use crate::outbound::*;
}
pub mod replica {
    pub use crate::replica::*;
}
pub mod router {
    pub use crate::router::*;
}
pub mod upkeep {
    pub use crate::upkeep::*;
}
pub mod services {
    pub use crate::services::*;
}
