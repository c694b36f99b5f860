//! Traces: OpenTelemetry spans, exported over OTLP/HTTP (protobuf bodies) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, and not set up at all otherwise.
//!
//! A submission's trace runs from intake to its deliveries' attempts:
//!
//! - `submission`: one accepted request to `POST /f/{endpoint_id}`, from its first byte to
//!   its answer;
//! - `outbox write`, its child: the wait for its batch and that batch's commit;
//! - `outbox batch`: one batch statement of intake's writers, a trace of its own with a
//!   link to each submission it wrote (a batch serves several submissions);
//! - `attempt`: one attempt of one delivery, a child of its submission's span, whichever
//!   process makes it and however much later: the submission's trace context is stored
//!   with it (`submissions.trace_parent`) and read back by the claim. A webhook's request
//!   carries the attempt's context as a W3C `traceparent` header.
//!
//! Spans carry ids, counts, outcomes and HTTP statuses only; never a submitted field's
//! name or value, a client address, a URL, a header or a secret. Only the spans of
//! [`TARGET`] are exported (no log events, no other crate's spans), and those are never
//! written to the log.
//!
//! Off (the variable unset), the spans of [`TARGET`] are disabled at their call sites by
//! the log's own filter ([`super::ceiling`]), no exporter or thread exists, no trace
//! context is computed and none is stored: the cost is a disabled span's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use opentelemetry_sdk::Resource;
use tracing::level_filters::LevelFilter;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The target of the spans that are exported, and of no log line.
pub const TARGET: &str = concat!(env!("CARGO_CRATE_NAME"), "::traces");

/// The service's name in its traces unless `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) names it otherwise.
pub const SERVICE_NAME: &str = "hymical-forms";

/// The name of the W3C trace-context header, as the propagator writes and reads it.
pub const TRACEPARENT: &str = "traceparent";

/// Whether traces are exported: set once, when the exporter is installed, so that the
/// paths that compute and store a trace context skip even that when it is not.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The exporter of a process that exports traces; [`Exporting::shutdown`] sends what is
/// still buffered.
pub struct Exporting {
    provider: SdkTracerProvider,
    tracer: Tracer,
}

/// Sets up the exporter: OTLP over HTTP with protobuf bodies to the collector the
/// `OTEL_EXPORTER_OTLP_*` variables name (`<endpoint>/v1/traces`), through the SDK's batch
/// processor, which exports from a thread of its own (the `OTEL_BSP_*` variables set its
/// delay and sizes): a request never waits on an export, and a full queue drops spans
/// rather than holding anything up.
pub fn start() -> Result<Exporting, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();
    let tracer = provider.tracer(SERVICE_NAME);
    ON.store(true, Ordering::Relaxed);
    Ok(Exporting { provider, tracer })
}

/// The resource the SDK reads from the environment (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`), named [`SERVICE_NAME`] when neither names the service
/// (the SDK's own default is `unknown_service`).
fn resource() -> Resource {
    let resource = Resource::builder().build();
    let named = resource
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        resource
    } else {
        Resource::builder().with_service_name(SERVICE_NAME).build()
    }
}

impl Exporting {
    /// The layer that turns the spans of [`TARGET`] into OpenTelemetry spans; nothing
    /// else reaches it (log events would become span events with their fields).
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_filter(Targets::new().with_target(TARGET, LevelFilter::TRACE))
    }

    /// Exports what is buffered and stops the exporter's thread; called once the
    /// services have stopped, so that the last spans (the last attempts) leave too.
    pub fn shutdown(self) {
        ON.store(false, Ordering::Relaxed);
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the last traces could not be exported");
        }
    }
}

/// The W3C `traceparent` of `span` when traces are on and the span is exported.
pub fn traceparent(span: &Span) -> Option<String> {
    if !on() {
        return None;
    }
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// The span context a stored `traceparent` names; `None` when it is malformed (or when
/// traces are off).
fn stored_context(traceparent: &str) -> Option<Context> {
    if !on() {
        return None;
    }
    let carrier = HashMap::from([(TRACEPARENT.to_string(), traceparent.to_string())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    context.span().span_context().is_valid().then_some(context)
}

/// Makes `span` (not yet entered) a child of the span a stored `traceparent` names. A
/// malformed stored value means no parent: the span then starts a trace of its own, since
/// a context that cannot be read names no trace to join (nothing else depends on it).
pub fn continue_trace(span: &Span, traceparent: Option<&str>) {
    let Some(parent) = traceparent.and_then(stored_context) else {
        return;
    };
    if let Err(error) = span.set_parent(parent) {
        // Only a span disabled by a filter, or entered already, refuses a parent.
        tracing::debug!(%error, "a span did not take its stored trace context");
    }
}

/// Links `span` (not yet entered) to the span a stored `traceparent` names, when it is
/// well-formed (a malformed one is simply not linked: there is nothing to link to).
pub fn link(span: &Span, traceparent: &str) {
    if let Some(context) = stored_context(traceparent) {
        let linked: SpanContext = context.span().span_context().clone();
        span.add_link(linked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off, nothing is computed or read: no context to store, none to continue.
    #[test]
    fn off_there_is_no_trace_context() {
        assert!(!on());
        assert_eq!(traceparent(&Span::current()), None);
        assert!(
            stored_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").is_none()
        );
    }

    /// The propagator reads a well-formed `traceparent` and refuses a malformed one.
    #[test]
    fn a_malformed_stored_context_names_no_parent() {
        let read = |value: &str| {
            let carrier = HashMap::from([(TRACEPARENT.to_string(), value.to_string())]);
            TraceContextPropagator::new()
                .extract(&carrier)
                .span()
                .span_context()
                .is_valid()
        };
        assert!(read(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ));
        assert!(!read(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"
        ));
        assert!(!read("not a trace context"));
        assert!(!read(
            "00-00000000000000000000000000000000-b7ad6b7169203331-01"
        ));
    }
}
