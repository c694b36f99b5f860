//! Typed configuration, read once at start-up from `FORMS_*` variables (docs/configuration.md).
//!
//! Every value is validated here and nowhere else. An invalid value is reported with the
//! variable's name, what is wrong with the value and the rule it broke; secret values (the
//! database URL, which may carry a password, and the rate-limit HMAC key) are never echoed.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Every variable this service reads. Anything else starting with `FORMS_` is reported as
/// unknown, which catches typos that would otherwise silently fall back to a default.
/// Read by the test suite (docs/configuration.md), never by the service.
const TEST_SUITE_VARIABLES: &[&str] = &[
    "FORMS_TEST_DATABASE_URL",
    "FORMS_FAULTS",
    "FORMS_SOAK_SECONDS",
];

pub const KNOWN_VARIABLES: &[&str] = &[
    "FORMS_DATABASE_URL",
    "FORMS_DATABASE_POOL_SIZE",
    "FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS",
    "FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS",
    "FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
    "FORMS_BIND",
    "FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS",
    "FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS",
    "FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS",
    "FORMS_HTTP_SEND_TIMEOUT_SECONDS",
    "FORMS_HTTP_MAX_CONNECTIONS",
    "FORMS_SHUTDOWN_TIMEOUT_SECONDS",
    "FORMS_DATA_DIR",
    "FORMS_AUTO_MIGRATE",
    "FORMS_API_ENABLED",
    "FORMS_WORKER_ENABLED",
    "FORMS_MAX_BODY_BYTES",
    "FORMS_MAX_FIELDS",
    "FORMS_MAX_FIELD_NAME_LENGTH",
    "FORMS_MAX_FIELD_VALUE_LENGTH",
    "FORMS_ENDPOINT_CACHE_SECONDS",
    "FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS",
    "FORMS_WEBHOOK_READ_TIMEOUT_SECONDS",
    "FORMS_WEBHOOK_MAX_ATTEMPTS",
    "FORMS_WEBHOOK_RETRY_INITIAL_SECONDS",
    "FORMS_WEBHOOK_RETRY_MAX_SECONDS",
    "FORMS_WEBHOOK_SECRET_OVERLAP_SECONDS",
    "FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES",
    "FORMS_WORKER_LEASE_SECONDS",
    "FORMS_WORKER_CONCURRENCY",
    "FORMS_WORKER_BATCH_SIZE",
    "FORMS_WORKER_POLL_SECONDS",
    "FORMS_WORKER_ENDPOINT_CONCURRENCY",
    "FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS",
    "FORMS_RATE_LIMIT_ENABLED",
    "FORMS_RATE_LIMIT_IP_REQUESTS",
    "FORMS_RATE_LIMIT_IP_WINDOW_SECONDS",
    "FORMS_RATE_LIMIT_ENDPOINT_REQUESTS",
    "FORMS_RATE_LIMIT_ENDPOINT_WINDOW_SECONDS",
    "FORMS_RATE_LIMIT_IP_SECRET",
    "FORMS_TRUSTED_PROXY_HOPS",
    "FORMS_SUBMISSION_RETENTION_DAYS",
    "FORMS_EVENT_RETENTION_HOURS",
    "FORMS_EXPORT_MAX_SUBMISSIONS",
    "FORMS_EXPORT_MAX_CONCURRENT",
    "FORMS_GRAPHQL_MAX_DEPTH",
    "FORMS_GRAPHQL_MAX_COMPLEXITY",
    "FORMS_GRAPHQL_MAX_PAGE_SIZE",
    "FORMS_GRAPHQL_MAX_EXPANDED_FIELDS",
    "FORMS_GRAPHQL_MAX_FRAGMENTS",
    "FORMS_LOG_FORMAT",
    "FORMS_METRICS_BIND",
    "FORMS_METRICS_REQUIRE_KEY",
];

/// The reference every variable is documented in; `serve --help` lists them from it.
const REFERENCE: &str = include_str!("../docs/configuration.md");

/// Every variable with its default and the first sentence of its meaning, from the
/// reference's tables, for `serve --help`.
pub fn variables_help() -> String {
    let plain = |cell: &str| cell.trim().replace(['`', '*'], "");
    let mut help = String::from(
        "Configuration: environment variables (also read from ./.env); docs/configuration.md has each rule in full.\n",
    );
    for line in REFERENCE
        .lines()
        .filter(|line| line.starts_with("| `FORMS_"))
    {
        let cells: Vec<&str> = line.split('|').collect();
        let [_, name, default, _, meaning, ..] = cells.as_slice() else {
            continue;
        };
        let name = plain(name);
        if TEST_SUITE_VARIABLES.contains(&name.as_str()) {
            continue;
        }
        let meaning = plain(meaning);
        let first = meaning
            .split_once(". ")
            .map_or(meaning.as_str(), |(first, _)| first)
            .trim_end_matches('.');
        help.push_str(&format!(
            "  {name} [default: {}]\n      {first}.\n",
            plain(default)
        ));
    }
    help
}

/// A value that must never be printed: `Debug` and `Display` show a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    /// `None`: the embedded cluster under `data_dir`.
    pub url: Option<Secret>,
    pub pool_size: u32,
    pub statement_timeout: Duration,
    /// How long opening a connection may take.
    pub connect_timeout: Duration,
    /// `idle_in_transaction_session_timeout` of every connection: a transaction left
    /// open (a client that stopped reading an export, say) ends after this long.
    pub idle_in_transaction_timeout: Duration,
    pub data_dir: PathBuf,
    pub auto_migrate: bool,
}

impl DatabaseConfig {
    /// The client-side deadline of one database call: a little past the server's own
    /// statement timeout, so that the server's clean error normally comes first and only
    /// a silent network ends a call here.
    pub fn call_timeout(&self) -> Duration {
        self.statement_timeout + CALL_TIMEOUT_MARGIN
    }
}

/// See [`DatabaseConfig::call_timeout`].
pub const CALL_TIMEOUT_MARGIN: Duration = Duration::from_secs(2);

/// Limits on what clients of the HTTP server may hold.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub bind: SocketAddr,
    /// A request's head must arrive within this long of the connection being ready for it.
    pub header_read_timeout: Duration,
    /// A connection with no request for this long is closed (at most the header timeout).
    pub keep_alive_timeout: Duration,
    /// A request's whole body must arrive within this long.
    pub body_read_timeout: Duration,
    /// A response (an export, say) that makes no progress for this long is abandoned.
    pub send_timeout: Duration,
    /// Connections served at once; beyond it new ones wait in the listen backlog.
    pub max_connections: usize,
    /// How long a stopping server waits for requests in flight.
    pub shutdown_timeout: Duration,
}

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
pub struct WebhookConfig {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub max_attempts: u32,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub allow_private_targets: bool,
    /// How long a rotated-out secret stays live beside the new one.
    pub secret_overlap: Duration,
    /// An endpoint whose deliveries end `failed` this many times in a row is paused;
    /// 0 never pauses for failures (a `410 Gone` still pauses).
    pub pause_after_failed_deliveries: u32,
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub enabled: bool,
    pub lease: Duration,
    pub concurrency: usize,
    pub batch_size: u32,
    pub poll_interval: Duration,
    /// Requests in flight to one endpoint at once, across every worker process.
    pub endpoint_concurrency: u32,
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

#[derive(Debug, Clone)]
pub struct GraphqlConfig {
    pub max_depth: usize,
    pub max_complexity: usize,
    pub max_page_size: usize,
    /// Fields a document may select once its fragments are expanded.
    pub max_expanded_fields: usize,
    pub max_fragments: usize,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub database: DatabaseConfig,
    pub http: HttpConfig,
    pub api_enabled: bool,
    pub intake: IntakeConfig,
    pub webhook: WebhookConfig,
    pub worker: WorkerConfig,
    pub rate_limit: RateLimitConfig,
    pub submission_retention_days: u32,
    /// How long delivery events stay resumable for subscribers (`afterEventId`).
    pub event_retention: Duration,
    pub export_max_submissions: u64,
    /// Exports streaming at once; each holds a database connection of its own.
    pub export_max_concurrent: usize,
    pub graphql: GraphqlConfig,
    pub log_format: LogFormat,
    pub metrics: MetricsConfig,
    /// Non-fatal findings (for example a short lease), logged once logging is up.
    pub warnings: Vec<String>,
}

/// One variable that failed its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub variable: &'static str,
    /// What is wrong with the value, without repeating a secret value.
    pub problem: String,
    pub rule: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}; rule: {}",
            self.variable, self.problem, self.rule
        )
    }
}

/// Where `/metrics` is served and whether it needs a management key.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// A listener of its own; `None`: `/metrics` on the API's listener (`FORMS_BIND`).
    pub bind: Option<SocketAddr>,
    pub require_key: bool,
}

/// Every invalid variable found in one pass, so an operator fixes them all at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for error in &self.0 {
            writeln!(f, "  {error}")?;
        }
        Ok(())
    }
}

impl Config {
    /// The rules that only `serve` has: a process must have something to do.
    pub fn check_serve(&self) -> Result<(), ConfigErrors> {
        if self.api_enabled || self.worker.enabled {
            return Ok(());
        }
        Err(ConfigErrors(vec![ConfigError {
            variable: "FORMS_WORKER_ENABLED",
            problem: "false, and so is FORMS_API_ENABLED: this process would do nothing".into(),
            rule: "at least one of FORMS_API_ENABLED and FORMS_WORKER_ENABLED must be true".into(),
        }]))
    }

    /// Reads the process environment (after an optional `.env` was loaded by the caller).
    pub fn from_env() -> Result<Config, ConfigErrors> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads through `lookup`, so tests can supply variables without touching the process
    /// environment. An empty value counts as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigErrors> {
        let mut reader = Reader {
            lookup: &lookup,
            errors: Vec::new(),
        };
        let r = &mut reader;

        let database_url = r.database_url();
        let pool_size = r.integer("FORMS_DATABASE_POOL_SIZE", 16, 1, 10_000);
        let statement_timeout = r.seconds("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", 30.0);
        let database_connect_timeout = r.seconds("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", 5.0);
        let idle_in_transaction_timeout =
            r.seconds("FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", 60.0);
        let bind = r.socket_addr("FORMS_BIND", SocketAddr::from(([127, 0, 0, 1], 8080)));
        let header_read_timeout = r.seconds("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", 10.0);
        let keep_alive_timeout = r.seconds("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", 5.0);
        let body_read_timeout = r.seconds("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", 30.0);
        let send_timeout = r.seconds("FORMS_HTTP_SEND_TIMEOUT_SECONDS", 30.0);
        let max_connections = r.integer("FORMS_HTTP_MAX_CONNECTIONS", 16_384, 1, 1_000_000);
        let shutdown_timeout = r.seconds("FORMS_SHUTDOWN_TIMEOUT_SECONDS", 30.0);
        let data_dir = PathBuf::from(
            r.raw("FORMS_DATA_DIR")
                .unwrap_or_else(|| "./.hymical".into()),
        );
        let auto_migrate = r.boolean("FORMS_AUTO_MIGRATE", false);
        let api_enabled = r.boolean("FORMS_API_ENABLED", true);
        let metrics_bind = r
            .raw("FORMS_METRICS_BIND")
            .map(|_| r.socket_addr("FORMS_METRICS_BIND", SocketAddr::from(([127, 0, 0, 1], 0))));
        let metrics_require_key = r.boolean("FORMS_METRICS_REQUIRE_KEY", true);
        let worker_enabled = r.boolean("FORMS_WORKER_ENABLED", true);

        let max_body_bytes = r.integer("FORMS_MAX_BODY_BYTES", 262_144, 1, 1 << 30);
        let max_fields = r.integer("FORMS_MAX_FIELDS", 100, 1, 1_000_000);
        let max_field_name_length = r.integer("FORMS_MAX_FIELD_NAME_LENGTH", 128, 1, 1 << 20);
        let max_field_value_length = r.integer("FORMS_MAX_FIELD_VALUE_LENGTH", 16_384, 1, 1 << 30);
        let endpoint_cache_max_age = r.seconds("FORMS_ENDPOINT_CACHE_SECONDS", 2.0);

        let connect_timeout = r.seconds("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", 5.0);
        let read_timeout = r.seconds("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", 10.0);
        let max_attempts = r.integer("FORMS_WEBHOOK_MAX_ATTEMPTS", 5, 1, 1_000);
        let retry_initial = r.seconds("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", 10.0);
        let retry_max = r.seconds("FORMS_WEBHOOK_RETRY_MAX_SECONDS", 3600.0);
        let allow_private_targets = r.boolean("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", false);
        let secret_overlap = r.integer(
            "FORMS_WEBHOOK_SECRET_OVERLAP_SECONDS",
            86_400,
            0,
            30 * 86_400,
        );
        let pause_after_failed_deliveries = r.integer(
            "FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES",
            20,
            0,
            1_000_000,
        );

        let lease = r.seconds("FORMS_WORKER_LEASE_SECONDS", 60.0);
        let concurrency = r.integer("FORMS_WORKER_CONCURRENCY", 32, 1, 100_000);
        let batch_size = r.integer("FORMS_WORKER_BATCH_SIZE", 10, 1, 10_000);
        let poll_interval = r.seconds("FORMS_WORKER_POLL_SECONDS", 1.0);
        let endpoint_concurrency = r.integer("FORMS_WORKER_ENDPOINT_CONCURRENCY", 8, 1, 100_000);

        let rate_limit_enabled = r.boolean("FORMS_RATE_LIMIT_ENABLED", true);
        let ip_requests = r.integer("FORMS_RATE_LIMIT_IP_REQUESTS", 60, 1, u32::MAX as u64);
        let ip_window_seconds = r.integer("FORMS_RATE_LIMIT_IP_WINDOW_SECONDS", 60, 1, 31_536_000);
        let endpoint_requests = r.integer(
            "FORMS_RATE_LIMIT_ENDPOINT_REQUESTS",
            600,
            1,
            u32::MAX as u64,
        );
        let endpoint_window_seconds = r.integer(
            "FORMS_RATE_LIMIT_ENDPOINT_WINDOW_SECONDS",
            60,
            1,
            31_536_000,
        );
        let ip_secret = r.ip_secret();
        let trusted_proxy_hops = r.integer("FORMS_TRUSTED_PROXY_HOPS", 0, 0, 64);

        let submission_retention_days =
            r.integer("FORMS_SUBMISSION_RETENTION_DAYS", 0, 0, 1_000_000);
        let event_retention_hours = r.integer("FORMS_EVENT_RETENTION_HOURS", 24, 1, 8_760);
        let export_max_submissions =
            r.integer("FORMS_EXPORT_MAX_SUBMISSIONS", 10_000, 1, 100_000_000);
        let export_max_concurrent = r.integer("FORMS_EXPORT_MAX_CONCURRENT", 2, 1, 1_000);
        let max_depth = r.integer("FORMS_GRAPHQL_MAX_DEPTH", 12, 1, 1_000);
        let max_complexity = r.integer("FORMS_GRAPHQL_MAX_COMPLEXITY", 2000, 1, 10_000_000);
        let max_page_size = r.integer("FORMS_GRAPHQL_MAX_PAGE_SIZE", 100, 1, 100_000);
        let max_expanded_fields =
            r.integer("FORMS_GRAPHQL_MAX_EXPANDED_FIELDS", 5_000, 1, 10_000_000);
        let max_fragments = r.integer("FORMS_GRAPHQL_MAX_FRAGMENTS", 100, 1, 100_000);
        let log_format = r.log_format();

        let mut warnings = Vec::new();
        // The lease must outlive the longest request a worker can make, or a second worker
        // claims a delivery that is still in flight (docs/delivery.md, "Leases").
        let timing_valid = !r.errors.iter().any(|e| {
            matches!(
                e.variable,
                "FORMS_WORKER_LEASE_SECONDS"
                    | "FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS"
                    | "FORMS_WEBHOOK_READ_TIMEOUT_SECONDS"
            )
        });
        if timing_valid {
            let request_budget = connect_timeout + read_timeout;
            if lease <= request_budget {
                r.errors.push(ConfigError {
                    variable: "FORMS_WORKER_LEASE_SECONDS",
                    problem: format!(
                        "{} does not exceed the webhook request budget of {} seconds",
                        lease.as_secs_f64(),
                        request_budget.as_secs_f64()
                    ),
                    rule: "must exceed FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS + FORMS_WEBHOOK_READ_TIMEOUT_SECONDS".into(),
                });
            } else if lease < request_budget * 2 {
                warnings.push(format!(
                    "FORMS_WORKER_LEASE_SECONDS={} is less than twice the webhook request budget of {} seconds; a slow receiver may be sent a delivery twice",
                    lease.as_secs_f64(),
                    request_budget.as_secs_f64()
                ));
            }
        }
        {
            let (initial, max) = (retry_initial, retry_max);
            if max < initial {
                warnings.push(format!(
                    "FORMS_WEBHOOK_RETRY_MAX_SECONDS={} is below FORMS_WEBHOOK_RETRY_INITIAL_SECONDS={}; every retry waits {} seconds",
                    max.as_secs_f64(),
                    initial.as_secs_f64(),
                    max.as_secs_f64()
                ));
            }
        }

        let http_valid = !r.errors.iter().any(|e| {
            matches!(
                e.variable,
                "FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS" | "FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS"
            )
        });
        // The server waits for a next request head under the header timeout, so a longer
        // keep-alive could never take effect.
        if http_valid && keep_alive_timeout > header_read_timeout {
            r.errors.push(ConfigError {
                variable: "FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS",
                problem: format!(
                    "{} exceeds the header read timeout of {} seconds",
                    keep_alive_timeout.as_secs_f64(),
                    header_read_timeout.as_secs_f64()
                ),
                rule: "at most FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS".into(),
            });
        }
        let transaction_valid = !r.errors.iter().any(|e| {
            matches!(
                e.variable,
                "FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS"
                    | "FORMS_HTTP_SEND_TIMEOUT_SECONDS"
            )
        });
        // An export keeps its transaction open while it waits for the client to take the
        // next chunk; the send deadline must end it first.
        if transaction_valid && idle_in_transaction_timeout <= send_timeout {
            r.errors.push(ConfigError {
                variable: "FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
                problem: format!(
                    "{} does not exceed the send timeout of {} seconds",
                    idle_in_transaction_timeout.as_secs_f64(),
                    send_timeout.as_secs_f64()
                ),
                rule: "must exceed FORMS_HTTP_SEND_TIMEOUT_SECONDS".into(),
            });
        }

        if metrics_bind.is_some_and(|metrics| metrics == bind) {
            r.errors.push(ConfigError {
                variable: "FORMS_METRICS_BIND",
                problem: format!("{bind} is FORMS_BIND's address too"),
                rule: "another address or port than FORMS_BIND, or unset to serve /metrics on FORMS_BIND".into(),
            });
        }

        if !reader.errors.is_empty() {
            return Err(ConfigErrors(reader.errors));
        }
        Ok(Config {
            database: DatabaseConfig {
                url: database_url,
                pool_size: pool_size as u32,
                statement_timeout,
                connect_timeout: database_connect_timeout,
                idle_in_transaction_timeout,
                data_dir,
                auto_migrate,
            },
            http: HttpConfig {
                bind,
                header_read_timeout,
                keep_alive_timeout,
                body_read_timeout,
                send_timeout,
                max_connections: max_connections as usize,
                shutdown_timeout,
            },
            api_enabled,
            intake: IntakeConfig {
                max_body_bytes: max_body_bytes as usize,
                max_fields: max_fields as usize,
                max_field_name_length: max_field_name_length as usize,
                max_field_value_length: max_field_value_length as usize,
                endpoint_cache_max_age,
            },
            webhook: WebhookConfig {
                connect_timeout,
                read_timeout,
                max_attempts: max_attempts as u32,
                retry_initial,
                retry_max,
                allow_private_targets,
                secret_overlap: Duration::from_secs(secret_overlap),
                pause_after_failed_deliveries: pause_after_failed_deliveries as u32,
            },
            worker: WorkerConfig {
                enabled: worker_enabled,
                lease,
                concurrency: concurrency as usize,
                batch_size: batch_size as u32,
                poll_interval,
                endpoint_concurrency: endpoint_concurrency as u32,
            },
            rate_limit: RateLimitConfig {
                enabled: rate_limit_enabled,
                ip_requests: ip_requests as u32,
                ip_window_seconds: ip_window_seconds as u32,
                endpoint_requests: endpoint_requests as u32,
                endpoint_window_seconds: endpoint_window_seconds as u32,
                ip_secret,
                trusted_proxy_hops: trusted_proxy_hops as usize,
            },
            submission_retention_days: submission_retention_days as u32,
            event_retention: Duration::from_secs(event_retention_hours * 3600),
            export_max_submissions,
            export_max_concurrent: export_max_concurrent as usize,
            graphql: GraphqlConfig {
                max_depth: max_depth as usize,
                max_complexity: max_complexity as usize,
                max_page_size: max_page_size as usize,
                max_expanded_fields: max_expanded_fields as usize,
                max_fragments: max_fragments as usize,
            },
            log_format,
            metrics: MetricsConfig {
                bind: metrics_bind,
                require_key: metrics_require_key,
            },
            warnings,
        })
    }

    /// `FORMS_*` names present in the environment that this service does not read (the
    /// test suite's own variables share the prefix and are not typos).
    pub fn unknown_variables(names: impl Iterator<Item = String>) -> BTreeSet<String> {
        names
            .filter(|name| {
                name.starts_with("FORMS_")
                    && !KNOWN_VARIABLES.contains(&name.as_str())
                    && !TEST_SUITE_VARIABLES.contains(&name.as_str())
            })
            .collect()
    }
}

struct Reader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    errors: Vec<ConfigError>,
}

impl Reader<'_> {
    fn raw(&self, name: &str) -> Option<String> {
        (self.lookup)(name).filter(|value| !value.trim().is_empty())
    }

    fn fail(&mut self, variable: &'static str, problem: String, rule: &str) {
        self.errors.push(ConfigError {
            variable,
            problem,
            rule: rule.to_string(),
        });
    }

    // Each reader returns the default after recording a failure, so that one pass reports
    // every invalid variable; `from_lookup` returns no `Config` when any failure was recorded.

    fn integer(&mut self, name: &'static str, default: u64, min: u64, max: u64) -> u64 {
        let Some(raw) = self.raw(name) else {
            return default;
        };
        let rule = format!("a whole number from {min} to {max}");
        match raw.trim().parse::<u64>() {
            Ok(value) if (min..=max).contains(&value) => value,
            Ok(value) => {
                self.fail(name, format!("{value} is out of range"), &rule);
                default
            }
            Err(_) => {
                self.fail(
                    name,
                    format!("{:?} is not a whole number", shorten(&raw)),
                    &rule,
                );
                default
            }
        }
    }

    /// Seconds as a positive decimal number (`0.5` allowed, for tests and fast local setups).
    fn seconds(&mut self, name: &'static str, default: f64) -> Duration {
        let fallback = Duration::from_secs_f64(default);
        let Some(raw) = self.raw(name) else {
            return fallback;
        };
        let rule = "a number of seconds greater than 0 (at most 31536000)";
        match raw.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 && value <= 31_536_000.0 => {
                Duration::from_secs_f64(value)
            }
            Ok(_) => {
                self.fail(
                    name,
                    format!("{} is out of range", shorten(raw.trim())),
                    rule,
                );
                fallback
            }
            Err(_) => {
                self.fail(name, format!("{:?} is not a number", shorten(&raw)), rule);
                fallback
            }
        }
    }

    fn boolean(&mut self, name: &'static str, default: bool) -> bool {
        let Some(raw) = self.raw(name) else {
            return default;
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => true,
            "false" | "0" | "no" | "off" => false,
            _ => {
                self.fail(
                    name,
                    format!("{:?} is not a boolean", shorten(&raw)),
                    "true or false (also 1/0, yes/no, on/off)",
                );
                default
            }
        }
    }

    fn socket_addr(&mut self, name: &'static str, default: SocketAddr) -> SocketAddr {
        let Some(raw) = self.raw(name) else {
            return default;
        };
        match raw.trim().parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => {
                self.fail(
                    name,
                    format!("{:?} is not an IP address and port", shorten(&raw)),
                    "HOST:PORT with a literal IP address, for example 127.0.0.1:8080 or [::]:8080",
                );
                default
            }
        }
    }

    fn database_url(&mut self) -> Option<Secret> {
        let raw = self.raw("FORMS_DATABASE_URL")?;
        let rule = "a postgres:// or postgresql:// URL, or unset for the embedded cluster";
        // The URL may hold a password: problems are described, the value never repeated.
        if !(raw.starts_with("postgres://") || raw.starts_with("postgresql://")) {
            self.fail(
                "FORMS_DATABASE_URL",
                "the value does not start with postgres:// or postgresql://".into(),
                rule,
            );
            return None;
        }
        // Also reads `sslrootcert`, so a missing certificate file is reported here.
        if let Err(problem) = crate::db::tls::parse(&raw) {
            self.fail("FORMS_DATABASE_URL", problem, rule);
            return None;
        }
        Some(Secret::new(raw))
    }

    fn ip_secret(&mut self) -> Option<Secret> {
        let raw = self.raw("FORMS_RATE_LIMIT_IP_SECRET")?;
        let length = raw.chars().count();
        if length < 16 {
            self.fail(
                "FORMS_RATE_LIMIT_IP_SECRET",
                format!("the value has {length} characters"),
                "at least 16 characters, or unset",
            );
            return None;
        }
        Some(Secret::new(raw))
    }

    fn log_format(&mut self) -> LogFormat {
        let Some(raw) = self.raw("FORMS_LOG_FORMAT") else {
            return LogFormat::Text;
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            _ => {
                self.fail(
                    "FORMS_LOG_FORMAT",
                    format!("{:?} is not a known format", shorten(&raw)),
                    "text or json",
                );
                LogFormat::Text
            }
        }
    }
}

/// Keeps error messages readable when someone pastes a long value into a variable.
fn shorten(raw: &str) -> String {
    const LIMIT: usize = 64;
    if raw.chars().count() <= LIMIT {
        raw.to_string()
    } else {
        let mut cut: String = raw.chars().take(LIMIT).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_match_the_documentation() {
        let config = load(&[]).expect("defaults are valid");
        assert!(config.database.url.is_none());
        assert_eq!(config.database.pool_size, 16);
        assert_eq!(config.http.bind, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.http.header_read_timeout, Duration::from_secs(10));
        assert_eq!(config.http.keep_alive_timeout, Duration::from_secs(5));
        assert_eq!(config.http.body_read_timeout, Duration::from_secs(30));
        assert_eq!(config.http.send_timeout, Duration::from_secs(30));
        assert_eq!(config.http.max_connections, 16_384);
        assert_eq!(config.http.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(config.database.connect_timeout, Duration::from_secs(5));
        assert_eq!(
            config.database.idle_in_transaction_timeout,
            Duration::from_secs(60)
        );
        assert_eq!(config.worker.endpoint_concurrency, 8);
        assert_eq!(config.export_max_concurrent, 2);
        assert_eq!(config.graphql.max_expanded_fields, 5_000);
        assert_eq!(config.graphql.max_fragments, 100);
        assert_eq!(config.database.data_dir, PathBuf::from("./.hymical"));
        assert!(!config.database.auto_migrate);
        assert!(config.api_enabled && config.worker.enabled);
        assert_eq!(config.intake.max_body_bytes, 262_144);
        assert_eq!(config.intake.max_fields, 100);
        assert_eq!(config.intake.max_field_name_length, 128);
        assert_eq!(config.intake.max_field_value_length, 16_384);
        assert_eq!(config.webhook.connect_timeout, Duration::from_secs(5));
        assert_eq!(config.webhook.read_timeout, Duration::from_secs(10));
        assert_eq!(config.webhook.max_attempts, 5);
        assert_eq!(config.webhook.retry_initial, Duration::from_secs(10));
        assert_eq!(config.webhook.retry_max, Duration::from_secs(3600));
        assert_eq!(config.worker.lease, Duration::from_secs(60));
        assert_eq!(config.worker.concurrency, 32);
        assert_eq!(config.worker.batch_size, 10);
        assert_eq!(config.worker.poll_interval, Duration::from_secs(1));
        assert!(!config.webhook.allow_private_targets);
        assert!(config.rate_limit.enabled);
        assert_eq!(config.rate_limit.ip_requests, 60);
        assert_eq!(config.rate_limit.ip_window_seconds, 60);
        assert_eq!(config.rate_limit.endpoint_requests, 600);
        assert_eq!(config.rate_limit.endpoint_window_seconds, 60);
        assert!(config.rate_limit.ip_secret.is_none());
        assert_eq!(config.rate_limit.trusted_proxy_hops, 0);
        assert_eq!(config.submission_retention_days, 0);
        assert_eq!(config.export_max_submissions, 10_000);
        assert_eq!(config.graphql.max_depth, 12);
        assert_eq!(config.graphql.max_complexity, 2000);
        assert_eq!(config.graphql.max_page_size, 100);
        assert_eq!(config.log_format, LogFormat::Text);
        assert!(config.warnings.is_empty());
    }

    #[test]
    fn every_invalid_value_names_its_variable() {
        // (variable, value, text the problem or rule must contain)
        let cases: &[(&str, &str, &str)] = &[
            ("FORMS_DATABASE_URL", "mysql://u:hunter2@h/db", "postgres://"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h:notaport/db", "valid"),
            ("FORMS_DATABASE_POOL_SIZE", "0", "out of range"),
            ("FORMS_DATABASE_POOL_SIZE", "many", "not a whole number"),
            ("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "10", "must exceed FORMS_HTTP_SEND_TIMEOUT_SECONDS"),
            ("FORMS_BIND", "localhost:8080", "literal IP"),
            ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "x", "not a number"),
            ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "11", "at most FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS"),
            ("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_HTTP_SEND_TIMEOUT_SECONDS", "-2", "greater than 0"),
            ("FORMS_HTTP_MAX_CONNECTIONS", "0", "from 1"),
            ("FORMS_SHUTDOWN_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_BIND", "127.0.0.1", "HOST:PORT"),
            ("FORMS_AUTO_MIGRATE", "maybe", "true or false"),
            ("FORMS_API_ENABLED", "2", "true or false"),
            ("FORMS_WORKER_ENABLED", "enabled", "true or false"),
            ("FORMS_MAX_BODY_BYTES", "0", "from 1"),
            ("FORMS_MAX_BODY_BYTES", "-5", "not a whole number"),
            ("FORMS_MAX_FIELDS", "0", "from 1"),
            ("FORMS_MAX_FIELD_NAME_LENGTH", "0", "from 1"),
            ("FORMS_MAX_FIELD_VALUE_LENGTH", "1.5", "not a whole number"),
            ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "soon", "not a number"),
            ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "-1", "greater than 0"),
            ("FORMS_WEBHOOK_MAX_ATTEMPTS", "0", "from 1"),
            ("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", "0", "greater than 0"),
            ("FORMS_WEBHOOK_RETRY_MAX_SECONDS", "NaN", "greater than 0"),
            ("FORMS_WEBHOOK_SECRET_OVERLAP_SECONDS", "-5", "from 0"),
            ("FORMS_WEBHOOK_SECRET_OVERLAP_SECONDS", "9999999999", "from 0"),
            ("FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES", "many", "from 0"),
            ("FORMS_WORKER_LEASE_SECONDS", "0", "greater than 0"),
            ("FORMS_WORKER_LEASE_SECONDS", "15", "must exceed FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS + FORMS_WEBHOOK_READ_TIMEOUT_SECONDS"),
            ("FORMS_WORKER_CONCURRENCY", "0", "from 1"),
            ("FORMS_WORKER_BATCH_SIZE", "0", "from 1"),
            ("FORMS_WORKER_POLL_SECONDS", "0", "greater than 0"),
            ("FORMS_ENDPOINT_CACHE_SECONDS", "0", "greater than 0"),
            ("FORMS_WORKER_ENDPOINT_CONCURRENCY", "0", "from 1"),
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "please", "true or false"),
            ("FORMS_RATE_LIMIT_ENABLED", "nah", "true or false"),
            ("FORMS_RATE_LIMIT_IP_REQUESTS", "0", "from 1"),
            ("FORMS_RATE_LIMIT_IP_WINDOW_SECONDS", "0", "from 1"),
            ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "0", "from 1"),
            ("FORMS_RATE_LIMIT_ENDPOINT_WINDOW_SECONDS", "x", "not a whole number"),
            ("FORMS_RATE_LIMIT_IP_SECRET", "short-secret", "at least 16 characters"),
            ("FORMS_TRUSTED_PROXY_HOPS", "-1", "not a whole number"),
            ("FORMS_SUBMISSION_RETENTION_DAYS", "-3", "not a whole number"),
            ("FORMS_EVENT_RETENTION_HOURS", "0", "from 1"),
            ("FORMS_EXPORT_MAX_SUBMISSIONS", "0", "from 1"),
            ("FORMS_EXPORT_MAX_CONCURRENT", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_DEPTH", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_COMPLEXITY", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_PAGE_SIZE", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_EXPANDED_FIELDS", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_FRAGMENTS", "0", "from 1"),
            ("FORMS_LOG_FORMAT", "xml", "text or json"),
            ("FORMS_METRICS_BIND", "metrics:9100", "literal IP"),
            ("FORMS_METRICS_BIND", "127.0.0.1:8080", "another address or port than FORMS_BIND"),
            ("FORMS_METRICS_REQUIRE_KEY", "sometimes", "true or false"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h/db?sslmode=verify", "not one of"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "cannot be read"),
        ];
        for (variable, value, expected) in cases {
            let errors = load(&[(variable, value)]).expect_err(variable).0;
            assert_eq!(errors.len(), 1, "{variable}={value}: {errors:?}");
            assert_eq!(errors[0].variable, *variable);
            let message = errors[0].to_string();
            assert!(message.starts_with(variable), "{message}");
            assert!(message.contains(expected), "{variable}={value}: {message}");
        }
    }

    #[test]
    fn every_known_variable_is_covered_by_the_invalid_value_table() {
        // Keeps the table above honest when a variable is added. The data dir accepts
        // any path, so it has no invalid value.
        let source = include_str!("config.rs");
        for variable in KNOWN_VARIABLES {
            if *variable == "FORMS_DATA_DIR" {
                continue;
            }
            let needle = format!("(\"{variable}\", \"");
            assert!(source.contains(&needle), "{variable} has no invalid case");
        }
    }

    #[test]
    fn secrets_are_never_echoed() {
        let errors = load(&[
            ("FORMS_DATABASE_URL", "mysql://user:hunter2@db/forms"),
            ("FORMS_RATE_LIMIT_IP_SECRET", "tooshort-hun"),
        ])
        .expect_err("both invalid");
        let text = errors.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("tooshort"), "{text}");
        let config = load(&[("FORMS_DATABASE_URL", "postgres://u:hunter2@db/forms")]).unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn all_errors_are_reported_together() {
        let errors = load(&[("FORMS_MAX_FIELDS", "0"), ("FORMS_LOG_FORMAT", "xml")])
            .expect_err("two invalid")
            .0;
        let names: Vec<_> = errors.iter().map(|e| e.variable).collect();
        assert_eq!(names, ["FORMS_MAX_FIELDS", "FORMS_LOG_FORMAT"]);
    }

    #[test]
    fn lease_below_twice_the_request_budget_warns() {
        let config = load(&[("FORMS_WORKER_LEASE_SECONDS", "20")]).expect("valid");
        assert_eq!(config.warnings.len(), 1);
        assert!(config.warnings[0].contains("FORMS_WORKER_LEASE_SECONDS"));
        let config = load(&[("FORMS_WORKER_LEASE_SECONDS", "30")]).expect("valid");
        assert!(config.warnings.is_empty());
    }

    #[test]
    fn empty_values_mean_default() {
        let config = load(&[
            ("FORMS_MAX_FIELDS", ""),
            ("FORMS_RATE_LIMIT_IP_SECRET", " "),
        ])
        .unwrap();
        assert_eq!(config.intake.max_fields, 100);
        assert!(config.rate_limit.ip_secret.is_none());
    }

    /// The configuration reference lists every variable the service reads.
    #[test]
    fn every_variable_is_documented() {
        let reference = include_str!("../docs/configuration.md");
        for variable in KNOWN_VARIABLES.iter().chain(TEST_SUITE_VARIABLES) {
            assert!(
                reference.contains(&format!("`{variable}`")),
                "{variable} is missing from docs/configuration.md"
            );
        }
    }

    #[test]
    fn unknown_forms_variables_are_reported() {
        let names = [
            "FORMS_BIND",
            "FORMS_BINDD",
            "PATH",
            "FORMS_TEST_DATABASE_URL",
        ]
        .map(String::from);
        let unknown = Config::unknown_variables(names.into_iter());
        assert_eq!(unknown.into_iter().collect::<Vec<_>>(), ["FORMS_BINDD"]);
    }
}
