//! The rate limits intake applies: which one refused a request.

use serde::Serialize;

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitScope {
    Ip,
    Endpoint,
}

impl RateLimitScope {
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimitScope::Ip => "ip",
            RateLimitScope::Endpoint => "endpoint",
        }
    }
}
