-- Back to one table each, every row copied (the partitioned tables and their partitions
-- go). The CHECKs of history_partition_bounds come back, bounded at infinity (its down
-- drops them).
CREATE TEMPORARY TABLE events_kept ON COMMIT DROP AS SELECT * FROM delivery_events;
CREATE TEMPORARY TABLE attempts_kept ON COMMIT DROP AS SELECT * FROM delivery_attempts;
CREATE TEMPORARY TABLE events_sequence ON COMMIT DROP AS
    SELECT last_value, is_called FROM delivery_events_id_seq;
DROP TABLE delivery_events;
DROP TABLE delivery_attempts;
DROP FUNCTION history_drop_partition(regclass, timestamptz);
DROP FUNCTION history_make_partitions(regclass, text, timestamptz, timestamptz);
DROP FUNCTION history_partitions(regclass);

CREATE TABLE delivery_events (
    id             bigint GENERATED ALWAYS AS IDENTITY,
    delivery_id    varchar(36) NOT NULL,
    endpoint_id    varchar(64) NOT NULL,
    kind           varchar(32) NOT NULL,
    state          varchar(16) NOT NULL,
    previous_state varchar(16) NULL,
    attempts       integer     NOT NULL,
    cycle_attempts integer     NOT NULL,
    outcome        varchar(32) NULL,
    occurred_at    timestamptz NOT NULL,
    CONSTRAINT delivery_events_pkey PRIMARY KEY (id),
    CONSTRAINT delivery_events_kind CHECK (kind IN ('created', 'claimed', 'attempt_recorded',
        'late_attempt_recorded', 'replayed', 'handed_back', 'failed_without_attempt',
        'cancelled')),
    CONSTRAINT delivery_events_state CHECK (state IN ('pending', 'processing', 'delivered', 'failed')),
    CONSTRAINT delivery_events_previous_state CHECK (
        previous_state IN ('pending', 'processing', 'delivered', 'failed')),
    CONSTRAINT delivery_events_partition_bound CHECK (occurred_at < 'infinity') NOT VALID
);
INSERT INTO delivery_events OVERRIDING SYSTEM VALUE SELECT * FROM events_kept;
SELECT setval(pg_get_serial_sequence('delivery_events', 'id'), last_value, is_called)
FROM events_sequence;
CREATE INDEX delivery_events_occurred_at_brin ON delivery_events USING brin (occurred_at);

CREATE TABLE delivery_attempts (
    id              varchar(36)   NOT NULL,
    delivery_id     varchar(36)   NOT NULL,
    submission_id   varchar(36),
    attempt_number  integer       NOT NULL,
    destination_url varchar(2048) NOT NULL,
    attempted_at    timestamptz   NOT NULL,
    outcome         varchar(32)   NOT NULL,
    response_status integer,
    error           varchar(500),
    duration_ms     integer       NOT NULL DEFAULT 0,
    late            boolean       NOT NULL DEFAULT false,
    reply           varchar(500),
    CONSTRAINT delivery_attempts_pkey PRIMARY KEY (id),
    CONSTRAINT delivery_attempts_id_format CHECK (length(id) = 36 AND id ~ '^att_[0-9a-f]+$'),
    CONSTRAINT delivery_attempts_delivery_id_fkey
        FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries (id),
    CONSTRAINT delivery_attempts_submission_id_fkey
        FOREIGN KEY (submission_id) REFERENCES submissions (id) ON DELETE SET NULL,
    CONSTRAINT delivery_attempts_delivery_number_unique UNIQUE (delivery_id, attempt_number),
    CONSTRAINT delivery_attempts_number_positive CHECK (attempt_number >= 1),
    CONSTRAINT delivery_attempts_outcome_valid CHECK (outcome IN ('succeeded', 'http_error',
        'timeout', 'network_error', 'blocked_destination', 'smtp_error', 'unsendable')),
    CONSTRAINT delivery_attempts_response_status_range
        CHECK (response_status IS NULL OR response_status BETWEEN 100 AND 599),
    CONSTRAINT delivery_attempts_duration_non_negative CHECK (duration_ms >= 0),
    CONSTRAINT delivery_attempts_partition_bound CHECK (attempted_at < 'infinity') NOT VALID
);
INSERT INTO delivery_attempts SELECT * FROM attempts_kept;
CREATE INDEX delivery_attempts_submission_id_idx ON delivery_attempts (submission_id);
