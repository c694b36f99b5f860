//! `FORMS_WEBHOOK_*`, `FORMS_WORKER_*`, `FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES`,
//! `FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES`, `FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS`:
//! how deliveries go out and are retried.

use std::time::Duration;

use super::reader::Reader;

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
    /// A destination whose run of failed deliveries reaches this many is announced once
    /// (a `failing` event and an operator alert) before it would pause; 0 never.
    pub warn_after_failed_deliveries: u32,
}

impl WebhookConfig {
    /// The server's retry schedule, which a destination without its own follows.
    pub fn retry_policy(&self) -> crate::model::receiver::RetryPolicy {
        crate::model::receiver::RetryPolicy {
            max_attempts: self.max_attempts,
            first_wait: self.retry_initial,
            max_wait: self.retry_max,
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub enabled: bool,
    pub lease: Duration,
    pub concurrency: usize,
    pub batch_size: u32,
    pub poll_interval: Duration,
    /// Requests in flight to one destination at once (unless it sets its own), across
    /// every worker process (`FORMS_WORKER_ENDPOINT_CONCURRENCY`, named when a destination
    /// was an endpoint).
    pub destination_concurrency: u32,
}

/// `alerting`: an operator alert channel is set (`FORMS_ALERT_*`), which turns the warning
/// threshold on by default.
pub(super) fn read_webhook(r: &mut Reader, alerting: bool) -> WebhookConfig {
    let pause_after = r.integer(
        "FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES",
        20,
        0,
        1_000_000,
    ) as u32;
    WebhookConfig {
        connect_timeout: r.seconds("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", 5.0),
        read_timeout: r.seconds("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", 10.0),
        max_attempts: r.integer("FORMS_WEBHOOK_MAX_ATTEMPTS", 5, 1, 1_000) as u32,
        retry_initial: r.seconds("FORMS_WEBHOOK_RETRY_INITIAL_SECONDS", 10.0),
        retry_max: r.seconds("FORMS_WEBHOOK_RETRY_MAX_SECONDS", 3600.0),
        allow_private_targets: r.boolean("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", false),
        secret_overlap: Duration::from_secs(r.integer(
            "FORMS_WEBHOOK_SECRET_OVERLAP_SECONDS",
            86_400,
            0,
            30 * 86_400,
        )),
        pause_after_failed_deliveries: pause_after,
        warn_after_failed_deliveries: read_warn_after(r, pause_after, alerting),
    }
}

const WARN_AFTER: &str = "FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES";

/// The warning threshold. The warning exists to tell operators, so by default it is on
/// only where they are told (`alerting`: an alert channel is set): half the pause
/// threshold (rounded up), so that they hear of a failing receiver while it still
/// delivers what it can; otherwise 0 (the events stay what they were). When set, below
/// the pause threshold (a warning at or past it would come with the pause).
fn read_warn_after(r: &mut Reader, pause_after: u32, alerting: bool) -> u32 {
    let default = if alerting {
        u64::from(pause_after.div_ceil(2))
    } else {
        0
    };
    let warn_after = r.integer(WARN_AFTER, default, 0, 1_000_000) as u32;
    if pause_after > 0 && warn_after >= pause_after && !r.failed(&[WARN_AFTER]) {
        r.fail(
            WARN_AFTER,
            format!("{warn_after} is not below the pause threshold of {pause_after}"),
            "below FORMS_ENDPOINT_PAUSE_AFTER_FAILED_DELIVERIES (0: no warning)",
        );
    }
    warn_after
}

pub(super) fn read_worker(r: &mut Reader) -> WorkerConfig {
    WorkerConfig {
        enabled: r.boolean("FORMS_WORKER_ENABLED", true),
        lease: r.seconds("FORMS_WORKER_LEASE_SECONDS", 60.0),
        concurrency: r.integer("FORMS_WORKER_CONCURRENCY", 64, 1, 100_000) as usize,
        batch_size: r.integer("FORMS_WORKER_BATCH_SIZE", 10, 1, 10_000) as u32,
        poll_interval: r.seconds("FORMS_WORKER_POLL_SECONDS", 1.0),
        destination_concurrency: r.integer("FORMS_WORKER_ENDPOINT_CONCURRENCY", 16, 1, 100_000)
            as u32,
    }
}

/// The rules between the two: returns the warnings (an error is recorded in `r`).
pub(super) fn check(r: &mut Reader, webhook: &WebhookConfig, worker: &WorkerConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    // The lease must outlive the longest request a worker can make, or a second worker
    // claims a delivery that is still in flight (docs/delivery.md, "Leases").
    if !r.failed(&[
        "FORMS_WORKER_LEASE_SECONDS",
        "FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS",
        "FORMS_WEBHOOK_READ_TIMEOUT_SECONDS",
    ]) {
        let request_budget = webhook.connect_timeout + webhook.read_timeout;
        if worker.lease <= request_budget {
            r.fail(
                "FORMS_WORKER_LEASE_SECONDS",
                format!(
                    "{} does not exceed the webhook request budget of {} seconds",
                    worker.lease.as_secs_f64(),
                    request_budget.as_secs_f64()
                ),
                "must exceed FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS + FORMS_WEBHOOK_READ_TIMEOUT_SECONDS",
            );
        } else if worker.lease < request_budget * 2 {
            warnings.push(format!(
                "FORMS_WORKER_LEASE_SECONDS={} is less than twice the webhook request budget of {} seconds; a slow receiver may be sent a delivery twice",
                worker.lease.as_secs_f64(),
                request_budget.as_secs_f64()
            ));
        }
    }
    let (initial, max) = (webhook.retry_initial, webhook.retry_max);
    if max < initial {
        warnings.push(format!(
            "FORMS_WEBHOOK_RETRY_MAX_SECONDS={} is below FORMS_WEBHOOK_RETRY_INITIAL_SECONDS={}; every retry waits {} seconds",
            max.as_secs_f64(),
            initial.as_secs_f64(),
            max.as_secs_f64()
        ));
    }
    warnings
}
