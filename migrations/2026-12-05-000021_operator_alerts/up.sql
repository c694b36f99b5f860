-- Operator alerts: a destination whose deliveries keep failing is announced once before
-- it would pause (an endpoint event `failing`), and once when it pauses and once when it
-- resumes (`paused`, `resumed`). Each such event of a destination gets a row here in the
-- transaction that writes the event, and the workers send it by email to the operators'
-- addresses and as an operational webhook (src/delivery/alerts.rs): an outbox of its own,
-- so a change of state is announced once however many processes run, and never lost to
-- a crash between the change and the sending.
ALTER TABLE endpoint_events DROP CONSTRAINT endpoint_events_kind;
ALTER TABLE endpoint_events ADD CONSTRAINT endpoint_events_kind
    CHECK (kind IN ('paused', 'resumed', 'deleted', 'failing'));

CREATE TABLE operator_alerts (
    id                bigint       GENERATED ALWAYS AS IDENTITY,
    -- The endpoint event announced (no foreign key: erasing an endpoint removes its
    -- events, and an alert already sent or owed is kept until it is done).
    event_id          bigint       NOT NULL,
    kind              varchar(16)  NOT NULL,
    endpoint_id       varchar(64)  NOT NULL,
    destination_id    varchar(36)  NOT NULL,
    reason            varchar(32),
    -- The destination's run of failed deliveries when the event was written.
    failed_deliveries integer      NOT NULL,
    occurred_at       timestamptz  NOT NULL,
    -- Each channel, once it took the alert (a channel not configured is never set).
    email_sent_at     timestamptz,
    webhook_sent_at   timestamptz,
    attempts          integer      NOT NULL DEFAULT 0,
    -- When a sender may take it next; NULL once it is done (sent, or given up).
    next_attempt_at   timestamptz,
    last_error        varchar(200),
    CONSTRAINT operator_alerts_pkey PRIMARY KEY (id),
    CONSTRAINT operator_alerts_event_unique UNIQUE (event_id),
    CONSTRAINT operator_alerts_kind_valid CHECK (kind IN ('failing', 'paused', 'resumed')),
    CONSTRAINT operator_alerts_reason_with_pause CHECK ((kind = 'paused') = (reason IS NOT NULL)),
    CONSTRAINT operator_alerts_attempts_non_negative CHECK (attempts >= 0)
);
-- What a sender takes: the alerts owed, by when.
CREATE INDEX operator_alerts_due_idx ON operator_alerts (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
