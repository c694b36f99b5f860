//! `FORMS_MAX_*`, `FORMS_ENDPOINT_CACHE_SECONDS`, `FORMS_RATE_LIMIT_*`,
//! `FORMS_TRUSTED_PROXY_HOPS`: what one submission may hold and how often one may come.

use std::time::Duration;

use super::reader::Reader;
use super::Secret;

#[derive(Debug, Clone)]
pub struct IntakeConfig {
    pub max_body_bytes: usize,
    pub max_fields: usize,
    pub max_field_name_length: usize,
    pub max_field_value_length: usize,
    /// How long intake trusts an endpoint it read without reading it again.
    pub endpoint_cache_max_age: Duration,
}

#[derive(Debug, Clone)]
pub struct RateLimitConfig {
    pub enabled: bool,
    pub ip_requests: u32,
    pub ip_window_seconds: u32,
    pub endpoint_requests: u32,
    pub endpoint_window_seconds: u32,
    pub ip_secret: Option<Secret>,
    pub trusted_proxy_hops: usize,
}

pub(super) fn read(r: &mut Reader) -> IntakeConfig {
    IntakeConfig {
        max_body_bytes: r.integer("FORMS_MAX_BODY_BYTES", 262_144, 1, 1 << 30) as usize,
        max_fields: r.integer("FORMS_MAX_FIELDS", 100, 1, 1_000_000) as usize,
        max_field_name_length: r.integer("FORMS_MAX_FIELD_NAME_LENGTH", 128, 1, 1 << 20) as usize,
        max_field_value_length: r.integer("FORMS_MAX_FIELD_VALUE_LENGTH", 16_384, 1, 1 << 30)
            as usize,
        endpoint_cache_max_age: r.seconds("FORMS_ENDPOINT_CACHE_SECONDS", 2.0),
    }
}

pub(super) fn read_rate_limits(r: &mut Reader) -> RateLimitConfig {
    const MAX_WINDOW_SECONDS: u64 = 31_536_000;
    RateLimitConfig {
        enabled: r.boolean("FORMS_RATE_LIMIT_ENABLED", true),
        ip_requests: r.integer("FORMS_RATE_LIMIT_IP_REQUESTS", 60, 1, u32::MAX as u64) as u32,
        ip_window_seconds: r.integer(
            "FORMS_RATE_LIMIT_IP_WINDOW_SECONDS",
            60,
            1,
            MAX_WINDOW_SECONDS,
        ) as u32,
        endpoint_requests: r.integer(
            "FORMS_RATE_LIMIT_ENDPOINT_REQUESTS",
            600,
            1,
            u32::MAX as u64,
        ) as u32,
        endpoint_window_seconds: r.integer(
            "FORMS_RATE_LIMIT_ENDPOINT_WINDOW_SECONDS",
            60,
            1,
            MAX_WINDOW_SECONDS,
        ) as u32,
        ip_secret: r.secret("FORMS_RATE_LIMIT_IP_SECRET", 16),
        trusted_proxy_hops: r.integer("FORMS_TRUSTED_PROXY_HOPS", 0, 0, 64) as usize,
    }
}
