-- The core tables (docs/data-model.md). Names of tables and columns are a contract shared
-- with the earlier Python service (0.2), whose databases can be adopted, and with the
-- receivers and tools written against it; every constraint is named so that errors and
-- migrations can refer to it.

CREATE TABLE endpoints (
    id             varchar(64)  NOT NULL,
    name           varchar(200) NOT NULL,
    is_active      boolean      NOT NULL DEFAULT true,
    created_at     timestamptz  NOT NULL DEFAULT now(),
    webhook_url    varchar(2048),
    webhook_secret varchar(70),
    CONSTRAINT endpoints_pkey PRIMARY KEY (id),
    CONSTRAINT endpoints_id_format CHECK (id ~ '^[a-z0-9][a-z0-9_-]{1,62}[a-z0-9]$'),
    CONSTRAINT endpoints_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT endpoints_webhook_url_and_secret_together
        CHECK ((webhook_url IS NULL) = (webhook_secret IS NULL)),
    CONSTRAINT endpoints_webhook_secret_format
        CHECK (webhook_secret IS NULL OR webhook_secret ~ '^whsec_[0-9a-f]{64}$')
);

CREATE TABLE submissions (
    id                  varchar(36)  NOT NULL,
    endpoint_id         varchar(64)  NOT NULL,
    received_at         timestamptz  NOT NULL,
    -- json, not jsonb: the order of field names is data.
    fields              json         NOT NULL,
    idempotency_key     varchar(255),
    payload_fingerprint varchar(64),
    CONSTRAINT submissions_pkey PRIMARY KEY (id),
    CONSTRAINT submissions_id_format CHECK (id ~ '^sub_[0-9a-f]{32}$'),
    CONSTRAINT submissions_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id),
    CONSTRAINT submissions_endpoint_idempotency_key_unique UNIQUE (endpoint_id, idempotency_key),
    CONSTRAINT submissions_idempotency_key_and_fingerprint_together
        CHECK ((idempotency_key IS NULL) = (payload_fingerprint IS NULL))
);
CREATE INDEX submissions_received_at_id_idx ON submissions (received_at, id);
CREATE INDEX submissions_endpoint_received_at_id_idx ON submissions (endpoint_id, received_at, id);

CREATE TABLE webhook_deliveries (
    id               varchar(36)   NOT NULL,
    submission_id    varchar(36),
    endpoint_id      varchar(64)   NOT NULL,
    destination_url  varchar(2048) NOT NULL,
    signing_secret   varchar(70)   NOT NULL,
    state            varchar(16)   NOT NULL DEFAULT 'pending',
    attempts         integer       NOT NULL DEFAULT 0,
    cycle_attempts   integer       NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz   NOT NULL,
    claim_expires_at timestamptz,
    claim_token      varchar(36),
    created_at       timestamptz   NOT NULL,
    completed_at     timestamptz,
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id),
    CONSTRAINT webhook_deliveries_id_format CHECK (id ~ '^whd_[0-9a-f]{32}$'),
    CONSTRAINT webhook_deliveries_submission_id_fkey
        FOREIGN KEY (submission_id) REFERENCES submissions (id) ON DELETE SET NULL,
    CONSTRAINT webhook_deliveries_submission_id_unique UNIQUE (submission_id),
    CONSTRAINT webhook_deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id),
    CONSTRAINT webhook_deliveries_state_valid
        CHECK (state IN ('pending', 'processing', 'delivered', 'failed')),
    CONSTRAINT webhook_deliveries_attempts_non_negative CHECK (attempts >= 0),
    CONSTRAINT webhook_deliveries_cycle_attempts_within_attempts
        CHECK (cycle_attempts >= 0 AND cycle_attempts <= attempts),
    CONSTRAINT webhook_deliveries_completed_at_iff_terminal
        CHECK ((state IN ('delivered', 'failed')) = (completed_at IS NOT NULL)),
    -- A claim is a token and a lease together, and only a processing row holds one.
    CONSTRAINT webhook_deliveries_claim_token_and_lease_together
        CHECK ((claim_token IS NULL) = (claim_expires_at IS NULL)),
    CONSTRAINT webhook_deliveries_claim_iff_processing
        CHECK ((state = 'processing') = (claim_token IS NOT NULL)),
    CONSTRAINT webhook_deliveries_claim_token_format
        CHECK (claim_token IS NULL OR claim_token ~ '^clm_[0-9a-f]{32}$')
);
CREATE INDEX webhook_deliveries_endpoint_created_at_id_idx
    ON webhook_deliveries (endpoint_id, created_at, id);
CREATE INDEX webhook_deliveries_created_at_id_idx ON webhook_deliveries (created_at, id);
-- Claiming reads only these two partial indexes, so delivered and failed rows, however
-- many pile up, are never scanned.
CREATE INDEX webhook_deliveries_pending_due_idx
    ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_processing_lease_idx
    ON webhook_deliveries (claim_expires_at) WHERE state = 'processing';

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
    CONSTRAINT delivery_attempts_pkey PRIMARY KEY (id),
    CONSTRAINT delivery_attempts_id_format CHECK (id ~ '^att_[0-9a-f]{32}$'),
    CONSTRAINT delivery_attempts_delivery_id_fkey
        FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries (id),
    CONSTRAINT delivery_attempts_submission_id_fkey
        FOREIGN KEY (submission_id) REFERENCES submissions (id) ON DELETE SET NULL,
    CONSTRAINT delivery_attempts_delivery_number_unique UNIQUE (delivery_id, attempt_number),
    CONSTRAINT delivery_attempts_number_positive CHECK (attempt_number >= 1),
    CONSTRAINT delivery_attempts_outcome_valid CHECK (
        outcome IN ('succeeded', 'http_error', 'timeout', 'network_error', 'blocked_destination')
    ),
    CONSTRAINT delivery_attempts_response_status_range
        CHECK (response_status IS NULL OR response_status BETWEEN 100 AND 599),
    CONSTRAINT delivery_attempts_duration_non_negative CHECK (duration_ms >= 0)
);
CREATE INDEX delivery_attempts_submission_id_idx ON delivery_attempts (submission_id);

CREATE TABLE management_api_keys (
    id             varchar(35)  NOT NULL,
    name           varchar(200) NOT NULL,
    display_prefix varchar(17)  NOT NULL,
    key_digest     varchar(64)  NOT NULL,
    created_at     timestamptz  NOT NULL DEFAULT now(),
    revoked_at     timestamptz,
    last_used_at   timestamptz,
    CONSTRAINT management_api_keys_pkey PRIMARY KEY (id),
    CONSTRAINT management_api_keys_id_format CHECK (id ~ '^mk_[0-9a-f]{32}$'),
    CONSTRAINT management_api_keys_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT management_api_keys_display_prefix_format CHECK (display_prefix ~ '^hym_live_.{8}$'),
    CONSTRAINT management_api_keys_key_digest_format CHECK (key_digest ~ '^[0-9a-f]{64}$'),
    CONSTRAINT management_api_keys_key_digest_unique UNIQUE (key_digest)
);

-- Counters are cheap to lose (a crash at worst resets a window) and written on every
-- public request, so they skip the write-ahead log.
CREATE UNLOGGED TABLE rate_limit_counters (
    limiter      varchar(32)  NOT NULL,
    subject      varchar(128) NOT NULL,
    window_start timestamptz  NOT NULL,
    attempts     integer      NOT NULL,
    CONSTRAINT rate_limit_counters_pkey PRIMARY KEY (limiter, subject, window_start),
    CONSTRAINT rate_limit_counters_attempts_positive CHECK (attempts >= 1)
);
CREATE INDEX rate_limit_counters_window_start_idx ON rate_limit_counters (window_start);
