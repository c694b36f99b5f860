//! Typed configuration, read once at start-up from `FORMS_*` variables (docs/configuration.md).
//!
//! Every value is validated here and nowhere else, one file per section. An invalid value
//! is reported with the variable's name, what is wrong with the value and the rule it
//! broke; secret values (the database URL, which may carry a password, the rate-limit
//! HMAC key and the SMTP password) are never echoed.

mod alerts;
mod database;
mod delivery;
mod files;
mod graphql;
mod http;
mod intake;
mod reader;
mod smtp;
mod spam;

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

pub use alerts::AlertConfig;
pub use database::{
    DatabaseConfig, ReadReplicaConfig, CALL_TIMEOUT_MARGIN, NETWORK_TIMEOUT_DEFAULT,
};
pub use delivery::{WebhookConfig, WorkerConfig};
pub use files::{FilesConfig, S3Config};
pub use graphql::GraphqlConfig;
pub use http::HttpConfig;
pub use intake::{IntakeConfig, RateLimitConfig};
use reader::Reader;
pub use smtp::{SmtpConfig, SmtpTls};
pub use spam::SpamConfig;

/// Read by the test suite (docs/configuration.md), never by the service: they share the
/// prefix and are not typos.
const TEST_SUITE_VARIABLES: &[&str] = &[
    "FORMS_TEST_DATABASE_URL",
    "FORMS_FAULTS",
    "FORMS_SOAK_SECONDS",
];

/// The reference every variable is documented in; `serve --help` lists them from it.
const REFERENCE: &str = include_str!("../../docs/configuration.md");

/// Every variable with its default and the first sentence of its meaning, from the
/// reference's tables, for `serve --help`.
pub fn variables_help() -> String {
    let plain = |cell: &str| cell.trim().replace(['`', '*'], "");
    let mut help = String::from(
        "Configuration: environment variables (also read from ./.env); docs/configuration.md has each rule in full.\n",
    );
    for line in REFERENCE
        .lines()
        .filter(|line| line.starts_with("| `FORMS_") || line.starts_with("| `OTEL_"))
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
pub struct Config {
    pub database: DatabaseConfig,
    pub http: HttpConfig,
    pub api_enabled: bool,
    pub intake: IntakeConfig,
    pub webhook: WebhookConfig,
    pub worker: WorkerConfig,
    /// The mail server of email destinations; `None`: `FORMS_SMTP_HOST` is unset and no
    /// email is sent.
    pub smtp: Option<SmtpConfig>,
    /// Where operator alerts are sent (`FORMS_ALERT_*`).
    pub alerts: AlertConfig,
    pub rate_limit: RateLimitConfig,
    /// Captcha providers, Akismet and the spam folder's retention.
    pub spam: SpamConfig,
    /// Uploaded files: storage, links, the sweeper's grace.
    pub files: FilesConfig,
    pub submission_retention_days: u32,
    /// How long delivery events stay resumable for subscribers (`afterEventId`).
    pub event_retention: Duration,
    /// How long the attempt history is kept, in days; 0: forever.
    pub attempt_retention_days: u32,
    /// How long the audit trail is kept, in days; 0: forever.
    pub audit_retention_days: u32,
    pub export_max_submissions: u64,
    /// Exports streaming at once; each holds a database connection of its own.
    pub export_max_concurrent: usize,
    pub graphql: GraphqlConfig,
    pub log_format: LogFormat,
    pub metrics: MetricsConfig,
    /// Where traces go (`OTEL_EXPORTER_OTLP_ENDPOINT`, checked here; the exporter reads
    /// it and the other `OTEL_*` variables itself); `None`: no traces, nothing set up.
    pub otlp_endpoint: Option<String>,
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
        let mut reader = Reader::new(&lookup);
        let config = read(&mut reader);
        if !reader.errors.is_empty() {
            return Err(ConfigErrors(reader.errors));
        }
        Ok(config)
    }

    /// Every variable the service reads: those a read of an empty environment asks for.
    pub fn known_variables() -> Vec<&'static str> {
        let unset = |_: &str| None;
        let mut reader = Reader::new(&unset);
        read(&mut reader);
        reader.asked
    }

    /// `FORMS_*` names present in the environment that this service does not read (the
    /// test suite's own variables share the prefix and are not typos): a typo would
    /// otherwise silently fall back to a default.
    pub fn unknown_variables(names: impl Iterator<Item = String>) -> BTreeSet<String> {
        let known = Config::known_variables();
        names
            .filter(|name| {
                name.starts_with("FORMS_")
                    && !known.contains(&name.as_str())
                    && !TEST_SUITE_VARIABLES.contains(&name.as_str())
            })
            .collect()
    }
}

/// Reads every section, then the rules between sections. Failures are recorded in `r`;
/// the value returned is only meaningful when there are none.
fn read(r: &mut Reader) -> Config {
    let database = database::read(r);
    let http = http::read(r);
    let api_enabled = r.boolean("FORMS_API_ENABLED", true);
    let metrics = MetricsConfig {
        bind: r.socket_addr("FORMS_METRICS_BIND"),
        require_key: r.boolean("FORMS_METRICS_REQUIRE_KEY", true),
    };
    let intake = intake::read(r);
    let alerting =
        r.raw("FORMS_ALERT_EMAILS").is_some() || r.raw("FORMS_ALERT_WEBHOOK_URL").is_some();
    let webhook = delivery::read_webhook(r, alerting);
    let worker = delivery::read_worker(r);
    let smtp = smtp::read(r);
    let smtp_host_set = r.raw("FORMS_SMTP_HOST").is_some();
    let alerts = alerts::read(r, smtp_host_set, webhook.allow_private_targets);
    let rate_limit = intake::read_rate_limits(r);
    let spam = spam::read(r);
    let files = files::read(r, http.bind);
    let submission_retention_days =
        r.integer("FORMS_SUBMISSION_RETENTION_DAYS", 0, 0, 1_000_000) as u32;
    let event_retention_hours = r.integer("FORMS_EVENT_RETENTION_HOURS", 24, 1, 8_760);
    let attempt_retention_days = r.integer("FORMS_ATTEMPT_RETENTION_DAYS", 0, 0, 1_000_000) as u32;
    let audit_retention_days = r.integer("FORMS_AUDIT_RETENTION_DAYS", 365, 0, 1_000_000) as u32;
    let export_max_submissions = r.integer("FORMS_EXPORT_MAX_SUBMISSIONS", 10_000, 1, 100_000_000);
    let export_max_concurrent = r.integer("FORMS_EXPORT_MAX_CONCURRENT", 2, 1, 1_000) as usize;
    let graphql = graphql::read(r, database.pool_size);
    let log_format = r.log_format("FORMS_LOG_FORMAT");
    let otlp_endpoint = otlp_endpoint(r);

    let mut warnings = delivery::check(r, &webhook, &worker);
    if r.raw("FORMS_PUBLIC_URL").is_none() && http.bind.ip().is_unspecified() {
        // The default names FORMS_BIND, which no client can reach at 0.0.0.0 or [::].
        warnings.push(format!(
            "FORMS_PUBLIC_URL is unset and FORMS_BIND is {}: download links of uploaded files start with {}, which no client can reach; set FORMS_PUBLIC_URL",
            http.bind, files.public_url
        ));
    }
    // An export keeps its transaction open while it waits for the client to take the
    // next chunk; the send deadline must end it first.
    if !r.failed(&[
        "FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
        "FORMS_HTTP_SEND_TIMEOUT_SECONDS",
    ]) && database.idle_in_transaction_timeout <= http.send_timeout
    {
        r.fail(
            "FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
            format!(
                "{} does not exceed the send timeout of {} seconds",
                database.idle_in_transaction_timeout.as_secs_f64(),
                http.send_timeout.as_secs_f64()
            ),
            "must exceed FORMS_HTTP_SEND_TIMEOUT_SECONDS",
        );
    }
    // A body of the largest size intake accepts must fit in the buffered-bodies budget.
    if !r.failed(&["FORMS_HTTP_MAX_BUFFERED_BODY_BYTES", "FORMS_MAX_BODY_BYTES"])
        && http.max_buffered_body_bytes < intake.max_body_bytes
    {
        r.fail(
            "FORMS_HTTP_MAX_BUFFERED_BODY_BYTES",
            format!(
                "{} is below FORMS_MAX_BODY_BYTES ({})",
                http.max_buffered_body_bytes, intake.max_body_bytes
            ),
            "at least FORMS_MAX_BODY_BYTES",
        );
    }
    if metrics.bind.is_some_and(|metrics| metrics == http.bind) {
        r.fail(
            "FORMS_METRICS_BIND",
            format!("{} is FORMS_BIND's address too", http.bind),
            "another address or port than FORMS_BIND, or unset to serve /metrics on FORMS_BIND",
        );
    }
    Config {
        database,
        http,
        api_enabled,
        intake,
        webhook,
        worker,
        smtp,
        alerts,
        rate_limit,
        spam,
        files,
        submission_retention_days,
        event_retention: Duration::from_secs(event_retention_hours * 3600),
        attempt_retention_days,
        audit_retention_days,
        export_max_submissions,
        export_max_concurrent,
        graphql,
        log_format,
        metrics,
        otlp_endpoint,
        warnings,
    }
}

/// The OTLP/HTTP collector traces are exported to: its base URL, to which the exporter
/// appends `/v1/traces` (the OpenTelemetry variable's own rule). Checked here so that a
/// typo stops the process with the variable named rather than leaving traces silently off.
fn otlp_endpoint(r: &mut Reader) -> Option<String> {
    const NAME: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
    let raw = r.raw(NAME)?;
    match url::Url::parse(raw.trim()) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            Some(raw.trim().to_string())
        }
        _ => {
            // Its value may carry credentials (user info): named, never echoed.
            r.fail(
                NAME,
                "is not an absolute http(s) URL".into(),
                "the collector's OTLP/HTTP base URL, for example http://collector:4318",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;

    /// The configuration these variables give (the other settings' tests use it too).
    pub(super) fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
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
        assert_eq!(config.database.network_timeout, Duration::from_secs(5));
        assert_eq!(
            config.database.idle_in_transaction_timeout,
            Duration::from_secs(60)
        );
        assert_eq!(config.worker.destination_concurrency, 16);
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
        assert_eq!(config.worker.concurrency, 64);
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
        assert_eq!(config.attempt_retention_days, 0);
        assert_eq!(config.export_max_submissions, 10_000);
        assert_eq!(config.graphql.max_depth, 12);
        assert_eq!(config.graphql.max_complexity, 5_000);
        assert_eq!(config.graphql.max_database_calls, 50);
        assert_eq!(config.graphql.database_connections, 8);
        assert_eq!(config.http.max_connections_per_address, 1_024);
        assert_eq!(config.http.max_buffered_body_bytes, 64 << 20);
        assert_eq!(config.graphql.max_page_size, 100);
        assert_eq!(config.log_format, LogFormat::Text);
        assert!(config.warnings.is_empty());
        assert!(config.smtp.is_none());
    }

    #[test]
    fn every_invalid_value_names_its_variable() {
        // (variable, value, text the problem or rule must contain)
        let cases: &[(&str, &str, &str)] = &[
            ("FORMS_DATABASE_URL", "mysql://u:hunter2@h/db", "postgres://"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h:notaport/db", "not a port number"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h1,h2/db", "target_session_attrs=read-write"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h1,h2/db?target_session_attrs=any", "target_session_attrs=read-write"),
            ("FORMS_DATABASE_POOL_SIZE", "0", "out of range"),
            ("FORMS_DATABASE_POOL_SIZE", "many", "not a whole number"),
            ("FORMS_DATABASE_READ_URL", "mysql://u:hunter2@h/db", "postgres://"),
            ("FORMS_DATABASE_READ_URL", "postgres://u:hunter2@standby/db", "set without FORMS_DATABASE_URL"),
            // Each of the others alone is an error for being set without the URL;
            // src/config/database.rs tests them with it.
            ("FORMS_DATABASE_READ_POOL_SIZE", "4", "set without FORMS_DATABASE_READ_URL"),
            ("FORMS_DATABASE_READ_MAX_LAG_SECONDS", "2", "set without FORMS_DATABASE_READ_URL"),
            ("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_DATABASE_NETWORK_TIMEOUT_SECONDS", "0.5", "at least 1"),
            ("FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "10", "must exceed FORMS_HTTP_SEND_TIMEOUT_SECONDS"),
            ("FORMS_BIND", "localhost:8080", "literal IP"),
            ("FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS", "x", "not a number"),
            ("FORMS_HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", "11", "at most FORMS_HTTP_HEADER_READ_TIMEOUT_SECONDS"),
            ("FORMS_HTTP_BODY_READ_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_HTTP_SEND_TIMEOUT_SECONDS", "-2", "greater than 0"),
            ("FORMS_HTTP_MAX_CONNECTIONS", "0", "from 1"),
            ("FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS", "-1", "not a whole number"),
            ("FORMS_HTTP_MAX_BUFFERED_BODY_BYTES", "1000", "at least FORMS_MAX_BODY_BYTES"),
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
            ("FORMS_ATTEMPT_RETENTION_DAYS", "1000001", "from 0 to 1000000"),
            ("FORMS_AUDIT_RETENTION_DAYS", "-1", "from 0 to 1000000"),
            ("FORMS_EXPORT_MAX_SUBMISSIONS", "0", "from 1"),
            ("FORMS_EXPORT_MAX_CONCURRENT", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_DEPTH", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_COMPLEXITY", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_PAGE_SIZE", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_EXPANDED_FIELDS", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_FRAGMENTS", "0", "from 1"),
            ("FORMS_GRAPHQL_MAX_DATABASE_CALLS", "0", "from 1"),
            ("FORMS_GRAPHQL_DATABASE_CONNECTIONS", "16", "less than FORMS_DATABASE_POOL_SIZE"),
            ("FORMS_GRAPHQL_CONCURRENT_OPERATIONS", "0", "from 1"),
            ("FORMS_LOG_FORMAT", "xml", "text or json"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "OTLP/HTTP base URL"),
            ("FORMS_METRICS_BIND", "metrics:9100", "literal IP"),
            ("FORMS_METRICS_BIND", "127.0.0.1:8080", "another address or port than FORMS_BIND"),
            ("FORMS_METRICS_REQUIRE_KEY", "sometimes", "true or false"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h/db?sslmode=verify", "not one of"),
            ("FORMS_DATABASE_URL", "postgres://u:hunter2@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "cannot be read"),
            // Alone, each SMTP variable but the host is also an error for being set
            // without FORMS_SMTP_HOST; src/config/smtp.rs tests them with the host.
            ("FORMS_SMTP_HOST", "smtp.example.com:587", "without a port"),
            ("FORMS_SMTP_PORT", "0", "from 1"),
            ("FORMS_SMTP_TLS", "ssl", "starttls, tls or none"),
            ("FORMS_SMTP_ALLOW_PLAINTEXT", "sometimes", "true or false"),
            ("FORMS_SMTP_USERNAME", "forms\r\n", "control character"),
            ("FORMS_SMTP_PASSWORD", "hunter2hunter2", "only with FORMS_SMTP_HOST"),
            ("FORMS_SMTP_FROM", "forms at example.com", "not an email address"),
            ("FORMS_SMTP_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_SMTP_CA_FILE", "/nonexistent/smtp-ca.pem", "cannot be read"),
            ("FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES", "20", "not below the pause threshold of 20"),
            // src/config/alerts.rs tests the alert variables with a mail server set.
            ("FORMS_ALERT_EMAILS", "ops@example.com", "FORMS_SMTP_HOST is not"),
            ("FORMS_ALERT_WEBHOOK_URL", "ftp://alerts.example.com", "not a webhook URL"),
            ("FORMS_ALERT_WEBHOOK_SECRET", "whsec_short", "whsec_ and the base64"),
            ("FORMS_CAPTCHA_TURNSTILE_VERIFY_URL", "ftp://verify.example", "an http(s) URL"),
            ("FORMS_CAPTCHA_HCAPTCHA_VERIFY_URL", "not a url", "an http(s) URL"),
            ("FORMS_CAPTCHA_RECAPTCHA_VERIFY_URL", "http://", "an http(s) URL"),
            ("FORMS_CAPTCHA_VERIFY_TIMEOUT_SECONDS", "0", "greater than 0"),
            ("FORMS_AKISMET_URL", "mailto:a@b.example", "an http(s) URL"),
            ("FORMS_AKISMET_API_KEY", "short", "at least 8"),
            ("FORMS_SPAM_RETENTION_DAYS", "-1", "whole number"),
            ("FORMS_FORM_STAMP_MAX_AGE_SECONDS", "60", "from 3600"),
            ("FORMS_SPAM_SCREENING_BUDGET_SECONDS", "0", "greater than 0"),
            ("FORMS_PUBLIC_URL", "forms.example.com", "absolute http or https URL"),
            ("FORMS_FILE_LINK_TTL_SECONDS", "0", "from 1"),
            ("FORMS_FILE_UPLOAD_TIMEOUT_SECONDS", "0", "from 1"),
            ("FORMS_FILE_SWEEP_GRACE_SECONDS", "60", "must exceed FORMS_FILE_UPLOAD_TIMEOUT_SECONDS"),
            // Each of the others alone is an error for being set without the bucket;
            // src/config/files.rs tests them with it.
            ("FORMS_S3_BUCKET", "forms", "set without FORMS_S3_ENDPOINT"),
            ("FORMS_S3_ENDPOINT", "http://127.0.0.1:9000", "only with FORMS_S3_BUCKET"),
            ("FORMS_S3_REGION", "eu-west-1", "only with FORMS_S3_BUCKET"),
            ("FORMS_S3_ACCESS_KEY_ID", "id", "only with FORMS_S3_BUCKET"),
            ("FORMS_S3_SECRET_ACCESS_KEY", "hunter2", "only with FORMS_S3_BUCKET"),
            ("FORMS_S3_PATH_STYLE", "true", "only with FORMS_S3_BUCKET"),
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

    /// A URL-valued setting and how its documented rule is tested: the other settings it
    /// needs to be read at all, what it reads back as, values it takes (and what each
    /// becomes) and values it refuses (each naming it, and it alone).
    struct UrlRule {
        variable: &'static str,
        with: &'static [(&'static str, &'static str)],
        read: fn(&Config) -> Option<String>,
        accepted: &'static [(&'static str, &'static str)],
        refused: &'static [&'static str],
    }

    const ALERT_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S3: &[(&str, &str)] = &[
        ("FORMS_S3_BUCKET", "forms"),
        ("FORMS_S3_ACCESS_KEY_ID", "id"),
        ("FORMS_S3_SECRET_ACCESS_KEY", "hunter2"),
    ];

    fn url_rules() -> Vec<UrlRule> {
        vec![
            UrlRule {
                variable: "FORMS_DATABASE_URL",
                with: &[],
                read: |c| c.database.url.as_ref().map(|u| u.expose().to_string()),
                accepted: &[
                    (
                        "postgres://u:p@db:5433/forms",
                        "postgres://u:p@db:5433/forms",
                    ),
                    ("postgresql://u:p@db/forms", "postgresql://u:p@db/forms"),
                    (
                        "host=db port=5432 dbname=forms user=u",
                        "host=db port=5432 dbname=forms user=u",
                    ),
                    (
                        "postgres://u:p@h1,h2/forms?target_session_attrs=read-write",
                        "postgres://u:p@h1,h2/forms?target_session_attrs=read-write",
                    ),
                ],
                refused: &[
                    "mysql://u:p@db/forms",
                    "https://db.example/forms",
                    "postgres://u:p@db:notaport/forms",
                    "postgres://u:p@h1,h2/forms",
                    "db.example",
                ],
            },
            UrlRule {
                variable: "FORMS_DATABASE_READ_URL",
                with: &[("FORMS_DATABASE_URL", "postgres://u:p@primary/forms")],
                read: |c| c.database.read.as_ref().map(|r| r.url.expose().to_string()),
                accepted: &[
                    (
                        "postgres://u:p@standby/forms",
                        "postgres://u:p@standby/forms",
                    ),
                    ("postgres://u:p@s1,s2/forms", "postgres://u:p@s1,s2/forms"),
                    ("host=standby dbname=forms", "host=standby dbname=forms"),
                ],
                refused: &[
                    "mysql://u:p@standby/forms",
                    "http://standby/forms",
                    "standby",
                ],
            },
            UrlRule {
                variable: "FORMS_ALERT_WEBHOOK_URL",
                with: &[("FORMS_ALERT_WEBHOOK_SECRET", ALERT_SECRET)],
                read: |c| c.alerts.webhook.as_ref().map(|w| w.url.clone()),
                accepted: &[
                    (
                        "https://alerts.example.com/hook",
                        "https://alerts.example.com/hook",
                    ),
                    (
                        "http://alerts.example.com:8080/a?b=c",
                        "http://alerts.example.com:8080/a?b=c",
                    ),
                ],
                refused: &[
                    "ftp://alerts.example.com/hook",
                    "alerts.example.com/hook",
                    "http://10.0.0.5/alerts",
                    "http://127.0.0.1:9000/alerts",
                ],
            },
            UrlRule {
                variable: "FORMS_CAPTCHA_TURNSTILE_VERIFY_URL",
                with: &[],
                read: |c| Some(c.spam.turnstile_url.clone()),
                accepted: &[
                    (
                        "http://127.0.0.1:9000/siteverify",
                        "http://127.0.0.1:9000/siteverify",
                    ),
                    ("https://verify.example", "https://verify.example/"),
                ],
                refused: &[
                    "ftp://verify.example",
                    "not a url",
                    "http://",
                    "/siteverify",
                ],
            },
            UrlRule {
                variable: "FORMS_CAPTCHA_HCAPTCHA_VERIFY_URL",
                with: &[],
                read: |c| Some(c.spam.hcaptcha_url.clone()),
                accepted: &[(
                    "http://127.0.0.1:9000/hcaptcha",
                    "http://127.0.0.1:9000/hcaptcha",
                )],
                refused: &[
                    "ftp://verify.example",
                    "not a url",
                    "http://",
                    "api.hcaptcha.com",
                ],
            },
            UrlRule {
                variable: "FORMS_CAPTCHA_RECAPTCHA_VERIFY_URL",
                with: &[],
                read: |c| Some(c.spam.recaptcha_url.clone()),
                accepted: &[(
                    "https://www.recaptcha.net/recaptcha/api/siteverify",
                    "https://www.recaptcha.net/recaptcha/api/siteverify",
                )],
                refused: &["ftp://verify.example", "not a url", "http://"],
            },
            UrlRule {
                variable: "FORMS_AKISMET_URL",
                with: &[],
                read: |c| Some(c.spam.akismet_url.clone()),
                // A missing final `/` is added: both spellings name the same base, so
                // `comment-check` is asked at `…/1.1/comment-check` either way.
                accepted: &[
                    (
                        "https://rest.akismet.com/1.1/",
                        "https://rest.akismet.com/1.1/",
                    ),
                    (
                        "https://rest.akismet.com/1.1",
                        "https://rest.akismet.com/1.1/",
                    ),
                    ("http://127.0.0.1:9000", "http://127.0.0.1:9000/"),
                    (
                        " http://127.0.0.1:9000/akismet/1.1 ",
                        "http://127.0.0.1:9000/akismet/1.1/",
                    ),
                ],
                refused: &[
                    "mailto:a@b.example",
                    "rest.akismet.com/1.1/",
                    "https://rest.akismet.com/1.1/?blog=x",
                    "https://rest.akismet.com/1.1/#top",
                ],
            },
            UrlRule {
                variable: "FORMS_PUBLIC_URL",
                with: &[],
                read: |c| Some(c.files.public_url.clone()),
                accepted: &[
                    ("https://forms.example.com/", "https://forms.example.com"),
                    (
                        "http://127.0.0.1:8080/forms/",
                        "http://127.0.0.1:8080/forms",
                    ),
                ],
                refused: &[
                    "forms.example.com",
                    "ftp://forms.example.com",
                    "https://forms.example.com/?a=b",
                    "https://forms.example.com/#top",
                ],
            },
            UrlRule {
                variable: "FORMS_S3_ENDPOINT",
                with: S3,
                read: |c| c.files.s3.as_ref().map(|s3| s3.endpoint.clone()),
                accepted: &[
                    ("http://127.0.0.1:9000/", "http://127.0.0.1:9000"),
                    (
                        "https://s3.eu-west-1.amazonaws.com",
                        "https://s3.eu-west-1.amazonaws.com",
                    ),
                ],
                refused: &["s3.example.com", "ftp://s3.example.com", "http://"],
            },
        ]
    }

    /// The URL-valued settings docs/configuration.md lists: a name ending in `_URL`, or a
    /// rule that asks for a URL (other variables named in the rule left out).
    fn documented_url_settings() -> Vec<String> {
        let reference = include_str!("../../docs/configuration.md");
        let mut found = Vec::new();
        for line in reference.lines() {
            let cells: Vec<&str> = line.split(" | ").collect();
            let Some(name) = cells
                .first()
                .and_then(|cell| cell.strip_prefix("| `"))
                .and_then(|cell| cell.strip_suffix('`'))
            else {
                continue;
            };
            if !name.starts_with("FORMS_") || TEST_SUITE_VARIABLES.contains(&name) {
                continue;
            }
            // The rule without the variables it names (`only with FORMS_…_URL`).
            let rule: String = cells.get(2).unwrap_or(&"").split('`').step_by(2).collect();
            if name.ends_with("_URL") || rule.contains("URL") {
                found.push(name.to_string());
            }
        }
        found
    }

    /// Every URL-valued setting is held to the rule its row documents, both
    /// the values it takes (and what they become) and those it refuses at start (which
    /// the binary turns into exit status 2, tests/integration/cli.rs).
    #[test]
    fn every_url_setting_follows_its_documented_rule() {
        let rules = url_rules();
        let mut tested: Vec<String> = rules.iter().map(|rule| rule.variable.to_string()).collect();
        let mut documented = documented_url_settings();
        tested.sort();
        documented.sort();
        assert_eq!(
            tested, documented,
            "every URL setting of docs/configuration.md has its rule tested here"
        );
        for rule in &rules {
            for (value, expected) in rule.accepted {
                let mut vars = rule.with.to_vec();
                vars.push((rule.variable, value));
                let config = load(&vars).unwrap_or_else(|errors| {
                    panic!("{}={value:?} refused: {errors}", rule.variable)
                });
                assert_eq!(
                    (rule.read)(&config).as_deref(),
                    Some(*expected),
                    "{}={value:?}",
                    rule.variable
                );
            }
            for value in rule.refused {
                let mut vars = rule.with.to_vec();
                vars.push((rule.variable, value));
                let errors = load(&vars)
                    .err()
                    .unwrap_or_else(|| panic!("{}={value:?} was accepted", rule.variable))
                    .0;
                let names: Vec<&str> = errors.iter().map(|e| e.variable).collect();
                assert_eq!(
                    names,
                    [rule.variable],
                    "{}={value:?}: {errors:?}",
                    rule.variable
                );
            }
        }
    }

    #[test]
    fn the_failing_warning_is_on_by_default_only_where_operators_are_told() {
        let quiet = load(&[]).unwrap();
        assert_eq!(quiet.webhook.warn_after_failed_deliveries, 0);
        let alerting = load(&[
            ("FORMS_ALERT_WEBHOOK_URL", "https://alerts.example.com/hook"),
            (
                "FORMS_ALERT_WEBHOOK_SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ),
        ])
        .unwrap();
        assert_eq!(alerting.webhook.warn_after_failed_deliveries, 10);
        let set = load(&[("FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES", "3")]).unwrap();
        assert_eq!(set.webhook.warn_after_failed_deliveries, 3);
    }

    #[test]
    fn every_known_variable_is_covered_by_the_invalid_value_table() {
        // Keeps the table above honest when a variable is added. The data dir accepts
        // any path, so it has no invalid value.
        let source = include_str!("mod.rs");
        for variable in Config::known_variables() {
            if variable == "FORMS_DATA_DIR" {
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
    fn a_database_url_may_name_a_primary_and_its_standbys() {
        for url in [
            "postgres://u:p@10.0.0.1:5432,10.0.0.2:5433/forms?target_session_attrs=read-write&sslmode=prefer",
            "postgresql://u:p@/forms?host=a,b&port=5432,5433&target_session_attrs=read-write",
            "postgres://u:p@[::1]:5432,[::1]:5433/forms?target_session_attrs=read-write",
        ] {
            let config = load(&[("FORMS_DATABASE_URL", url)]).unwrap();
            assert!(config.database.url.is_some(), "{url}");
        }
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
        let reference = include_str!("../../docs/configuration.md");
        for variable in Config::known_variables().iter().chain(TEST_SUITE_VARIABLES) {
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
