-- The W3C trace context (a `traceparent`) of the span that accepted a submission, when
-- the accepting process exported traces (OTEL_EXPORTER_OTLP_ENDPOINT); NULL otherwise.
-- Every attempt of the submission's deliveries, whichever process makes it and however
-- much later, continues that trace from here. It holds ids only (a trace id, a span id,
-- flags), nothing submitted. A `traceparent` of version 00 is 55 characters; the room
-- left is for a later version's longer form.
ALTER TABLE submissions ADD COLUMN trace_parent varchar(128);
