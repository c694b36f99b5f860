//! Traces (telemetry/traces.rs): a `serve` process with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! exports, over OTLP/HTTP with protobuf bodies, one trace from a submission's intake to
//! its delivery's attempt, and sends the attempt's `traceparent` to the receiver; the
//! spans carry ids, never what was submitted. Without the variable nothing of it happens.
//!
//! The collector here is an axum server on loopback that decodes each export as the
//! protocol's own `ExportTraceServiceRequest`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use hymical_forms::testing::clock::SystemClock;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use support::harness::{serve_on_loopback, wait_for_status, ServeProcess, TestApp};
use support::receiver::Receiver;

const FIELD_NAME: &str = "tracedprivatefield";
const FIELD_VALUE: &str = "nightjar-private-value-5174";

/// What the collector was sent: each export's raw body, and every span with its
/// resource's `service.name`.
#[derive(Clone, Default)]
struct Collector {
    bodies: Arc<Mutex<Vec<Bytes>>>,
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Collector {
    /// Serves `POST /v1/traces` on loopback; answers the base URL to give the exporter.
    async fn start(&self) -> String {
        let router = Router::new()
            .route("/v1/traces", post(export))
            .with_state(self.clone());
        format!("http://{}", serve_on_loopback(router).await)
    }

    fn spans(&self) -> Vec<(String, Span)> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans once one of each name in `names` has arrived (at most 60 s).
    async fn wait_for(&self, names: &[&str]) -> Vec<(String, Span)> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.spans();
            let missing: Vec<&&str> = names
                .iter()
                .filter(|name| !spans.iter().any(|(_, span)| span.name == **name))
                .collect();
            if missing.is_empty() {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "no span named {missing:?} was exported within 60 s; got {:?}",
                spans.iter().map(|(_, span)| &span.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One OTLP/HTTP export: a protobuf `ExportTraceServiceRequest`, answered as the protocol
/// says (an `ExportTraceServiceResponse`, same content type).
async fn export(State(collector): State<Collector>, body: Bytes) -> impl IntoResponse {
    let request = match ExportTraceServiceRequest::decode(body.clone()) {
        Ok(request) => request,
        Err(error) => return (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
    };
    collector.bodies.lock().unwrap().push(body);
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|resource| text_attribute(&resource.attributes, "service.name"))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                collector
                    .spans
                    .lock()
                    .unwrap()
                    .push((service.clone(), span));
            }
        }
    }
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

/// An attribute's value as text (strings as they are, numbers and flags written out).
fn attribute_text(attribute: &KeyValue) -> String {
    match attribute
        .value
        .as_ref()
        .and_then(|value| value.value.as_ref())
    {
        Some(Value::StringValue(text)) => text.clone(),
        Some(Value::IntValue(number)) => number.to_string(),
        Some(Value::BoolValue(flag)) => flag.to_string(),
        Some(Value::DoubleValue(number)) => number.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn text_attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .map(attribute_text)
}

/// The one span named `name` (its attribute `key` being `value`, when given).
fn the_span<'a>(spans: &'a [(String, Span)], name: &str, with: Option<(&str, &str)>) -> &'a Span {
    let found: Vec<&Span> = spans
        .iter()
        .map(|(_, span)| span)
        .filter(|span| span.name == name)
        .filter(|span| {
            with.is_none_or(|(key, value)| {
                text_attribute(&span.attributes, key).as_deref() == Some(value)
            })
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "spans named {name} with {with:?}: {found:#?}"
    );
    found[0]
}

/// The submission posted to the process's endpoint `traced`: its id.
async fn submit(serve: &ServeProcess) -> String {
    let response = support::harness::post_urlencoded(
        &reqwest::Client::new(),
        serve.url("/f/traced"),
        format!("{FIELD_NAME}={FIELD_VALUE}"),
    )
    .await
    .expect("post");
    assert_eq!(response.status(), 202);
    let receipt: serde_json::Value = response.json().await.expect("receipt");
    receipt["submission_id"]
        .as_str()
        .expect("submission id")
        .to_string()
}

/// SIGTERM, and the exit (at most 30 s) off the runtime's threads, which serve the
/// collector meanwhile.
async fn stop(serve: ServeProcess) -> String {
    let (status, log) =
        tokio::task::spawn_blocking(move || serve.stop_within(Duration::from_secs(30)))
            .await
            .expect("stop");
    assert!(status.is_some_and(|status| status.success()), "{log}");
    log
}

/// Intake and the attempt in one process (the delivery claimed at intake, its context
/// taken from the submission in memory).
#[tokio::test(flavor = "multi_thread")]
async fn one_trace_runs_from_intake_to_the_attempt() {
    one_trace(false).await;
}

/// The attempt in a worker process of its own, started after the submission was stored:
/// the context comes from the database, through the claim.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_in_another_process_continues_the_trace() {
    one_trace(true).await;
}

/// A submission and its delivery, traced; with `split`, accepted by an API-only process
/// and delivered by a worker-only one.
async fn one_trace(split: bool) {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    app.webhook_endpoint("traced", &receiver.url("/ok")).await;
    let traced = |role: &'static str| {
        let mut vars = vec![
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            // Exported within 100 ms rather than the default 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ];
        if split {
            vars.push((role, "false"));
        }
        ServeProcess::start(&app.db, &vars)
    };
    let serve = traced("FORMS_WORKER_ENABLED");
    wait_for_status(&serve.url("/health"), 200).await;
    let submission_id = submit(&serve).await;
    let worker = split.then(|| traced("FORMS_API_ENABLED"));
    let received = receiver.wait_for(1).await;
    // The graceful stop exports what is still buffered.
    let mut log = stop(serve).await;
    if let Some(worker) = worker {
        log.push_str(&stop(worker).await);
    }
    let spans = collector
        .wait_for(&["submission", "outbox write", "outbox batch", "attempt"])
        .await;

    // The receiver got the attempt's context, in the W3C form.
    let traceparent = received[0]
        .headers
        .get("traceparent")
        .expect("a traceparent header")
        .to_str()
        .expect("text")
        .to_string();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!((parts[0], parts[3]), ("00", "01"), "{traceparent}");
    let (trace_id, attempt_span_id) = (parts[1], parts[2]);

    // One trace: the submission's span, its outbox write, and the attempt (a child of
    // the submission's span, through the context stored with the submission).
    let submission = the_span(
        &spans,
        "submission",
        Some(("submission_id", &submission_id)),
    );
    assert_eq!(hex::encode(&submission.trace_id), trace_id);
    assert!(submission.parent_span_id.is_empty(), "a trace's root");
    assert_eq!(
        text_attribute(&submission.attributes, "endpoint_id").as_deref(),
        Some("traced")
    );
    assert_eq!(
        text_attribute(&submission.attributes, "http.response.status_code").as_deref(),
        Some("202")
    );
    let write = the_span(&spans, "outbox write", None);
    assert_eq!(write.trace_id, submission.trace_id);
    assert_eq!(write.parent_span_id, submission.span_id);
    let attempt = the_span(&spans, "attempt", None);
    assert_eq!(hex::encode(&attempt.trace_id), trace_id);
    assert_eq!(hex::encode(&attempt.span_id), attempt_span_id);
    assert_eq!(attempt.parent_span_id, submission.span_id);
    for (key, value) in [
        ("submission_id", submission_id.as_str()),
        ("endpoint_id", "traced"),
        ("destination_kind", "webhook"),
        ("attempt", "1"),
        ("outcome", "succeeded"),
        ("http.response.status_code", "200"),
    ] {
        assert_eq!(
            text_attribute(&attempt.attributes, key).as_deref(),
            Some(value),
            "the attempt's {key}: {:?}",
            attempt.attributes
        );
    }
    let delivery_id = text_attribute(&attempt.attributes, "delivery_id").expect("delivery id");
    assert_eq!(app.db.delivery_ids().await, [delivery_id]);
    // The batch that wrote it is a trace of its own, linked to the submission.
    let batch = the_span(&spans, "outbox batch", None);
    assert!(
        batch
            .links
            .iter()
            .any(|link| link.trace_id == submission.trace_id && link.span_id == submission.span_id),
        "the batch links its submission: {:?}",
        batch.links
    );
    // Stored with the submission: the submission span's context.
    assert_eq!(
        app.db
            .count(&format!(
                "SELECT count(*) AS n FROM submissions WHERE id = '{submission_id}' AND trace_parent = '00-{trace_id}-{}-01'",
                hex::encode(&submission.span_id)
            ))
            .await,
        1
    );
    for (service, _) in &spans {
        assert_eq!(service, "hymical-forms");
    }

    // Nothing submitted, in any attribute or anywhere in what was exported; no address.
    for (_, span) in &spans {
        for attribute in &span.attributes {
            let text = attribute_text(attribute);
            for private in [FIELD_NAME, FIELD_VALUE, "127.0.0.1"] {
                assert!(
                    !text.contains(private) && !attribute.key.contains(private),
                    "span {} carries {private} in {}",
                    span.name,
                    attribute.key
                );
            }
        }
        assert!(span.events.is_empty(), "span {} has events", span.name);
    }
    for body in collector.bodies.lock().unwrap().iter() {
        for private in [FIELD_NAME, FIELD_VALUE] {
            assert!(
                !body
                    .windows(private.len())
                    .any(|window| window == private.as_bytes()),
                "an export carries {private}"
            );
        }
    }
    // And no span is a log line.
    assert!(!log.contains("outbox write"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_variable_nothing_is_traced() {
    let receiver = Receiver::start().await;
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    app.webhook_endpoint("traced", &receiver.url("/ok")).await;
    let serve = ServeProcess::start(&app.db, &[("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true")]);
    wait_for_status(&serve.url("/health"), 200).await;
    submit(&serve).await;
    let received = receiver.wait_for(1).await;
    stop(serve).await;
    assert!(
        received[0].headers.get("traceparent").is_none(),
        "{:?}",
        received[0].headers
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM submissions WHERE trace_parent IS NOT NULL")
            .await,
        0
    );
}
