//! What the process counts, rendered in the Prometheus text format for `/metrics` (served
//! by the router, `router/metrics.rs`).
//!
//! Every metric name is written here and nowhere else; the rest of the code calls the
//! functions below. Labels are closed vocabularies (an HTTP status, an attempt outcome, a
//! delivery state): never an endpoint id, an address, a field or anything a client chose,
//! so a scrape's size is bounded and nothing submitted reaches the monitoring system.
//!
//! Counters and histograms are kept in memory by the process that does the work (an
//! API-only process has no delivery figures, a worker-only one no intake figures). The
//! queue's figures are the database's, read at each scrape, so every process reports the
//! same queue. See docs/operations.md for the list and what each means.

use std::future::Future;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::db;
use crate::model::state::{
    AttemptOutcome, DeliveryState, DestinationKind, EndpointEventKind, PauseReason,
};

/// Seconds; from a fast loopback answer to the slowest request timeout.
const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How often histogram samples are folded into their buckets. Until then each is kept
/// apart, so without this a process nobody scrapes would keep every sample it recorded.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process's one recorder. Installed before anything is counted: [`install`] is called
/// when the application state is built, and a value recorded before that would be lost.
static RECORDER: LazyLock<PrometheusHandle> = LazyLock::new(|| {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("duration_seconds".into()), DURATION_BUCKETS)
        .expect("the bucket list is not empty")
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .expect("this module installs the only metrics recorder, once");
    describe();
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_INTERVAL);
            upkeep.run_upkeep();
        })
        .expect("a thread can be started at start-up");
    handle
});

static PROCESS: LazyLock<metrics_process::Collector> = LazyLock::new(|| {
    let collector = metrics_process::Collector::default();
    collector.describe();
    collector
});

/// Installs the recorder (once per process; later calls do nothing).
pub fn install() {
    LazyLock::force(&RECORDER);
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "hymical_http_refused_total",
        "Connections and requests the HTTP server refused to protect the others: `address_connections` (a client address already held FORMS_HTTP_MAX_CONNECTIONS_PER_ADDRESS connections), `buffered_bodies` (FORMS_HTTP_MAX_BUFFERED_BODY_BYTES were held)."
    );
    describe_counter!(
        "hymical_intake_requests_total",
        "Form submissions answered, by HTTP status."
    );
    describe_counter!(
        "hymical_intake_screened_total",
        "Submissions screened for spam, by verdict: `accepted`, `spam`, `refused` (a captcha not solved, or a verifier unreachable under the refuse policy)."
    );
    describe_counter!(
        "hymical_spam_verifier_failures_total",
        "Verifications that gave no verdict (no answer in time, a connection failure, an error status, an answer that is not one; an endpoint's own rules past their time budget), by verifier: `captcha`, `akismet`, `screening`."
    );
    describe_histogram!(
        "hymical_intake_request_duration_seconds",
        Unit::Seconds,
        "Time to answer a form submission, from its head to the answer."
    );
    describe_counter!(
        "hymical_intake_batches_total",
        "Batches intake's writers sent to the database (group commit)."
    );
    describe_counter!(
        "hymical_intake_batched_requests_total",
        "Requests in those batches; divided by the batches, the mean batch size."
    );
    describe_histogram!(
        "hymical_intake_statement_duration_seconds",
        Unit::Seconds,
        "Time of a batch's statement, from sending it to its answer (its commit included), by statement: count (the rate limits' counters) or outbox (the submissions, deliveries and events)."
    );
    describe_counter!(
        "hymical_deliveries_claimed_total",
        "Deliveries this process's worker claimed, by where: worker (its claim loop) or intake (written claimed with their submission)."
    );
    describe_counter!(
        "hymical_delivery_attempts_total",
        "Delivery attempts recorded by this process (webhook requests, emails), by destination kind and outcome."
    );
    describe_histogram!(
        "hymical_delivery_attempt_duration_seconds",
        Unit::Seconds,
        "Duration of a delivery attempt, from sending to the answer or the failure, by destination kind."
    );
    describe_counter!(
        "hymical_deliveries_finished_total",
        "Deliveries this process moved to a terminal state (delivered, or failed after the last attempt), by destination kind."
    );
    describe_counter!(
        "hymical_operator_alerts_sent_total",
        "Operator alerts this process sent, by channel (email, webhook) and kind (failing, paused, resumed)."
    );
    describe_counter!(
        "hymical_delivery_late_attempts_total",
        "Attempts recorded after their claim had been superseded (the lease ran out first)."
    );
    describe_counter!(
        "hymical_endpoint_pauses_total",
        "Endpoints this process paused, by reason: gone (a 410), failure_threshold, operator."
    );
    describe_counter!(
        "hymical_endpoint_resumes_total",
        "Paused endpoints this process resumed."
    );
    describe_gauge!(
        "hymical_endpoints_paused",
        "Endpoints whose deliveries are paused (the database's figure at the scrape)."
    );
    describe_gauge!(
        "hymical_delivery_queue",
        "Deliveries in each state, for all endpoints (the database's figure at the scrape)."
    );
    describe_gauge!(
        "hymical_delivery_oldest_due_seconds",
        Unit::Seconds,
        "How long the oldest due pending delivery has been due (0 when none is)."
    );
    describe_gauge!(
        "hymical_workers_in_flight",
        "Webhook requests this process has in flight."
    );
    describe_gauge!(
        "hymical_event_feed_lag_seconds",
        Unit::Seconds,
        "Age of the newest delivery event when the event reader broadcast it."
    );
    describe_gauge!(
        "hymical_subscriptions_open",
        "GraphQL subscription operations running on this process."
    );
    describe_gauge!(
        "hymical_db_pool_connections",
        "Connections of this process's database pool, in use or idle."
    );
    describe_gauge!(
        "hymical_db_pool_waiting",
        "Database calls of this process waiting for a pooled connection."
    );
    describe_gauge!(
        "hymical_replica_lag_seconds",
        Unit::Seconds,
        "How long the read replica has been missing write-ahead log the primary had (0 when it has replayed all the primary had at the last measurement), measured every second."
    );
    describe_gauge!(
        "hymical_replica_lag_bytes",
        Unit::Bytes,
        "Write-ahead log the primary had and the read replica had not replayed, at the last measurement."
    );
    describe_gauge!(
        "hymical_replica_serving",
        "1 while reads go to the read replica, 0 while they go to the primary (the replica past FORMS_DATABASE_READ_MAX_LAG_SECONDS, unreachable, or not a standby of the primary)."
    );
    describe_counter!(
        "hymical_replica_reads_total",
        "Reads that may go to the read replica, by read (graphql: a query operation; export; catch_up: a subscription's history) and by the server that served them (replica, primary)."
    );
}

/// Which reads may go to the read replica.
#[derive(Debug, Clone, Copy)]
pub enum ReplicaRead {
    Graphql,
    Export,
    CatchUp,
}

/// One read that may go to the replica, and where it went.
pub fn replica_read(read: ReplicaRead, on_replica: bool) {
    let read = match read {
        ReplicaRead::Graphql => "graphql",
        ReplicaRead::Export => "export",
        ReplicaRead::CatchUp => "catch_up",
    };
    let served_by = if on_replica { "replica" } else { "primary" };
    metrics::counter!("hymical_replica_reads_total", "read" => read, "served_by" => served_by)
        .increment(1);
}

/// What the replica's monitor measured: the lag (unchanged when it could not measure)
/// and whether reads go to the replica.
pub fn replica_measured(lag: Option<(Duration, u64)>, serving: bool) {
    if let Some((seconds, bytes)) = lag {
        metrics::gauge!("hymical_replica_lag_seconds").set(seconds.as_secs_f64());
        metrics::gauge!("hymical_replica_lag_bytes").set(bytes as f64);
    }
    metrics::gauge!("hymical_replica_serving").set(if serving { 1.0 } else { 0.0 });
}

/// One answered form submission.
pub fn intake_request(status: u16, duration: Duration) {
    metrics::counter!("hymical_intake_requests_total", "status" => status.to_string()).increment(1);
    metrics::histogram!("hymical_intake_request_duration_seconds").record(duration);
}

/// One batch of `size` requests taken by an intake writer.
pub fn intake_batch(size: usize) {
    metrics::counter!("hymical_intake_batches_total").increment(1);
    metrics::counter!("hymical_intake_batched_requests_total").increment(size as u64);
}

/// The statements an intake writer runs for a batch.
#[derive(Debug, Clone, Copy)]
pub enum IntakeStatement {
    /// The batch's rate-limit counters.
    Count,
    /// The batch's submissions, deliveries and events (the transactional outbox).
    Outbox,
}

/// Runs one of a batch's statements (`call`), recording its time from sending it to its
/// answer.
pub async fn intake_statement<T>(statement: IntakeStatement, call: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let answer = call.await;
    let statement = match statement {
        IntakeStatement::Count => "count",
        IntakeStatement::Outbox => "outbox",
    };
    metrics::histogram!("hymical_intake_statement_duration_seconds", "statement" => statement)
        .record(started.elapsed());
    answer
}

/// Deliveries claimed for this process's worker, by its claim loop or at intake.
pub fn deliveries_claimed(by: &'static str, count: usize) {
    metrics::counter!("hymical_deliveries_claimed_total", "by" => by).increment(count as u64);
}

/// One recorded attempt (a webhook request or an email), by the destination's kind, never
/// its address; `finished` when it moved the delivery to a terminal state.
pub fn delivery_attempt(
    kind: DestinationKind,
    outcome: AttemptOutcome,
    duration: Duration,
    finished: Option<DeliveryState>,
) {
    metrics::counter!("hymical_delivery_attempts_total", "kind" => kind.as_str(), "outcome" => outcome.as_str())
        .increment(1);
    metrics::histogram!("hymical_delivery_attempt_duration_seconds", "kind" => kind.as_str())
        .record(duration);
    if let Some(state) = finished.filter(|state| state.is_terminal()) {
        metrics::counter!("hymical_deliveries_finished_total", "kind" => kind.as_str(), "state" => state.as_str())
            .increment(1);
    }
}

/// One operator alert a channel took (`email`, `webhook`), by its kind.
pub fn operator_alert_sent(channel: &'static str, kind: EndpointEventKind) {
    metrics::counter!("hymical_operator_alerts_sent_total", "channel" => channel, "kind" => kind.as_str())
        .increment(1);
}

/// A delivery failed without a request (its submission was erased).
pub fn delivery_failed_without_attempt(kind: DestinationKind) {
    metrics::counter!("hymical_deliveries_finished_total", "kind" => kind.as_str(), "state" => DeliveryState::Failed.as_str())
        .increment(1);
}

/// An endpoint's deliveries were paused.
pub fn endpoint_paused(reason: PauseReason) {
    metrics::counter!("hymical_endpoint_pauses_total", "reason" => reason.as_str()).increment(1);
}

/// A paused endpoint was resumed.
pub fn endpoint_resumed() {
    metrics::counter!("hymical_endpoint_resumes_total").increment(1);
}

/// A verifier (a captcha provider, Akismet) gave no verdict.
pub fn verifier_failed(verifier: &'static str) {
    metrics::counter!("hymical_spam_verifier_failures_total", "verifier" => verifier).increment(1);
}

/// A submission screened for spam: `accepted`, `spam` or `refused`.
pub fn screened(verdict: &'static str) {
    metrics::counter!("hymical_intake_screened_total", "verdict" => verdict).increment(1);
}

pub fn late_attempt() {
    metrics::counter!("hymical_delivery_late_attempts_total").increment(1);
}

/// Adds one to a gauge for as long as it lives (the handle kept, so it is looked up once).
pub struct Held(metrics::Gauge);

impl Held {
    fn start(name: &'static str) -> Held {
        let gauge = metrics::gauge!(name);
        gauge.increment(1.0);
        Held(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// A webhook request in flight, counted while the value lives.
pub fn in_flight() -> Held {
    Held::start("hymical_workers_in_flight")
}

/// A connection closed at once: its address held its cap of connections.
pub fn connection_refused_for_its_address() {
    metrics::counter!("hymical_http_refused_total", "reason" => "address_connections").increment(1);
}

/// A request refused with 503: the bodies buffered at once were at their bound.
pub fn request_refused_for_buffered_bodies() {
    metrics::counter!("hymical_http_refused_total", "reason" => "buffered_bodies").increment(1);
}

/// A subscription operation, counted while the value lives.
pub fn open_subscription() -> Held {
    Held::start("hymical_subscriptions_open")
}

/// The event reader broadcast an event this old (by this process's clock).
pub fn event_feed_lag(lag: Duration) {
    metrics::gauge!("hymical_event_feed_lag_seconds").set(lag.as_secs_f64());
}

/// The queue and the pool as a scrape reports them: read when the scrape asks, so every
/// process reports the same queue.
pub fn record_queue_and_pool(queue: &db::deliveries::QueueFigures, pool: db::PoolUsage) {
    for (state, count) in [
        (DeliveryState::Pending, queue.counts.pending),
        (DeliveryState::Processing, queue.counts.processing),
        (DeliveryState::Delivered, queue.counts.delivered),
        (DeliveryState::Failed, queue.counts.failed),
    ] {
        metrics::gauge!("hymical_delivery_queue", "state" => state.as_str()).set(count as f64);
    }
    metrics::gauge!("hymical_delivery_oldest_due_seconds").set(queue.oldest_due_seconds);
    metrics::gauge!("hymical_endpoints_paused").set(queue.paused_endpoints as f64);
    metrics::gauge!("hymical_db_pool_connections", "state" => "in_use").set(f64::from(pool.in_use));
    metrics::gauge!("hymical_db_pool_connections", "state" => "idle").set(f64::from(pool.idle));
    metrics::gauge!("hymical_db_pool_waiting").set(pool.waiting as f64);
}

/// Everything counted, in the Prometheus text format (version 0.0.4), with the process's
/// own figures read now.
pub fn render() -> String {
    PROCESS.collect();
    RECORDER.render()
}
