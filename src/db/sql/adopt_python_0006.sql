-- Takes over a database the earlier Python service (hymical-forms 0.2) left at its Alembic
-- revision 0006: its tables become exactly what this product's first migration
-- (create_core_tables) creates, with every row kept, so that the later migrations apply
-- as on any database of ours. Run in one transaction by `hymical-forms migrate --adopt`,
-- after it checked the revision and the set of tables; any failure leaves everything as
-- it was. The earlier service must be stopped first.

-- Claims of the earlier service's workers are handed back: their deliveries are due again
-- (at least once; nothing is lost) and carry no token of a format this product does not
-- write.
UPDATE webhook_deliveries
SET state = 'pending', claim_token = NULL, claim_expires_at = NULL
WHERE state = 'processing';

ALTER TABLE endpoints RENAME CONSTRAINT pk_endpoints TO endpoints_pkey;
ALTER TABLE endpoints DROP CONSTRAINT ck_endpoints_webhook_configuration;
ALTER TABLE endpoints
    ALTER COLUMN is_active SET DEFAULT true,
    ALTER COLUMN created_at SET DEFAULT now(),
    ADD CONSTRAINT endpoints_id_format CHECK (id ~ '^[a-z0-9][a-z0-9_-]{1,62}[a-z0-9]$'),
    ADD CONSTRAINT endpoints_name_not_blank CHECK (btrim(name) <> ''),
    ADD CONSTRAINT endpoints_webhook_url_and_secret_together
        CHECK ((webhook_url IS NULL) = (webhook_secret IS NULL)),
    ADD CONSTRAINT endpoints_webhook_secret_format
        CHECK (webhook_secret IS NULL OR webhook_secret ~ '^whsec_[0-9a-f]{64}$');

ALTER TABLE submissions RENAME CONSTRAINT pk_submissions TO submissions_pkey;
ALTER TABLE submissions RENAME CONSTRAINT fk_submissions_endpoint_id_endpoints
    TO submissions_endpoint_id_fkey;
ALTER TABLE submissions RENAME CONSTRAINT uq_submissions_endpoint_idempotency_key
    TO submissions_endpoint_idempotency_key_unique;
ALTER TABLE submissions RENAME CONSTRAINT ck_submissions_idempotency_identity
    TO submissions_idempotency_key_and_fingerprint_together;
ALTER TABLE submissions ADD CONSTRAINT submissions_id_format CHECK (id ~ '^sub_[0-9a-f]{32}$');
ALTER INDEX ix_submissions_received_at_id RENAME TO submissions_received_at_id_idx;
ALTER INDEX ix_submissions_endpoint_id_received_at_id
    RENAME TO submissions_endpoint_received_at_id_idx;

ALTER TABLE webhook_deliveries RENAME CONSTRAINT pk_webhook_deliveries TO webhook_deliveries_pkey;
ALTER TABLE webhook_deliveries RENAME CONSTRAINT fk_webhook_deliveries_submission_id_submissions
    TO webhook_deliveries_submission_id_fkey;
ALTER TABLE webhook_deliveries RENAME CONSTRAINT uq_webhook_deliveries_submission
    TO webhook_deliveries_submission_id_unique;
ALTER TABLE webhook_deliveries RENAME CONSTRAINT fk_webhook_deliveries_endpoint_id_endpoints
    TO webhook_deliveries_endpoint_id_fkey;
ALTER TABLE webhook_deliveries RENAME CONSTRAINT ck_webhook_deliveries_completion
    TO webhook_deliveries_completed_at_iff_terminal;
ALTER TABLE webhook_deliveries
    ALTER COLUMN state SET DEFAULT 'pending',
    ALTER COLUMN attempts SET DEFAULT 0,
    ALTER COLUMN cycle_attempts SET DEFAULT 0,
    ADD CONSTRAINT webhook_deliveries_id_format CHECK (id ~ '^whd_[0-9a-f]{32}$'),
    ADD CONSTRAINT webhook_deliveries_state_valid
        CHECK (state IN ('pending', 'processing', 'delivered', 'failed')),
    ADD CONSTRAINT webhook_deliveries_attempts_non_negative CHECK (attempts >= 0),
    ADD CONSTRAINT webhook_deliveries_cycle_attempts_within_attempts
        CHECK (cycle_attempts >= 0 AND cycle_attempts <= attempts),
    ADD CONSTRAINT webhook_deliveries_claim_token_and_lease_together
        CHECK ((claim_token IS NULL) = (claim_expires_at IS NULL)),
    ADD CONSTRAINT webhook_deliveries_claim_iff_processing
        CHECK ((state = 'processing') = (claim_token IS NOT NULL)),
    ADD CONSTRAINT webhook_deliveries_claim_token_format
        CHECK (claim_token IS NULL OR claim_token ~ '^clm_[0-9a-f]{32}$');
ALTER INDEX ix_webhook_deliveries_endpoint_id_created_at_id
    RENAME TO webhook_deliveries_endpoint_created_at_id_idx;
DROP INDEX ix_webhook_deliveries_next_attempt_at;
CREATE INDEX webhook_deliveries_created_at_id_idx ON webhook_deliveries (created_at, id);
CREATE INDEX webhook_deliveries_pending_due_idx
    ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_processing_lease_idx
    ON webhook_deliveries (claim_expires_at) WHERE state = 'processing';

ALTER TABLE delivery_attempts RENAME CONSTRAINT pk_delivery_attempts TO delivery_attempts_pkey;
ALTER TABLE delivery_attempts RENAME CONSTRAINT fk_delivery_attempts_delivery_id_webhook_deliveries
    TO delivery_attempts_delivery_id_fkey;
ALTER TABLE delivery_attempts RENAME CONSTRAINT fk_delivery_attempts_submission_id_submissions
    TO delivery_attempts_submission_id_fkey;
-- The earlier service recorded no durations and no late attempts.
ALTER TABLE delivery_attempts
    ADD COLUMN duration_ms integer NOT NULL DEFAULT 0,
    ADD COLUMN late boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT delivery_attempts_id_format CHECK (id ~ '^att_[0-9a-f]{32}$'),
    ADD CONSTRAINT delivery_attempts_delivery_number_unique UNIQUE (delivery_id, attempt_number),
    ADD CONSTRAINT delivery_attempts_number_positive CHECK (attempt_number >= 1),
    ADD CONSTRAINT delivery_attempts_outcome_valid CHECK (
        outcome IN ('succeeded', 'http_error', 'timeout', 'network_error', 'blocked_destination')
    ),
    ADD CONSTRAINT delivery_attempts_response_status_range
        CHECK (response_status IS NULL OR response_status BETWEEN 100 AND 599),
    ADD CONSTRAINT delivery_attempts_duration_non_negative CHECK (duration_ms >= 0);
-- The unique (delivery_id, attempt_number) index serves what this one did.
DROP INDEX ix_delivery_attempts_delivery_id;
ALTER INDEX ix_delivery_attempts_submission_id RENAME TO delivery_attempts_submission_id_idx;

ALTER TABLE management_api_keys RENAME CONSTRAINT pk_management_api_keys
    TO management_api_keys_pkey;
ALTER TABLE management_api_keys RENAME CONSTRAINT uq_management_api_keys_key_digest
    TO management_api_keys_key_digest_unique;
ALTER TABLE management_api_keys
    ALTER COLUMN created_at SET DEFAULT now(),
    ADD CONSTRAINT management_api_keys_id_format CHECK (id ~ '^mk_[0-9a-f]{32}$'),
    ADD CONSTRAINT management_api_keys_name_not_blank CHECK (btrim(name) <> ''),
    ADD CONSTRAINT management_api_keys_display_prefix_format
        CHECK (display_prefix ~ '^hym_live_.{8}$'),
    ADD CONSTRAINT management_api_keys_key_digest_format CHECK (key_digest ~ '^[0-9a-f]{64}$');

-- Counters become unlogged, as this product keeps them (a crash may reset a window; no
-- counter costs a durable write). The earlier service's rows stay until their windows end
-- and the sweeper removes them.
ALTER TABLE rate_limit_counters SET UNLOGGED;
ALTER TABLE rate_limit_counters RENAME CONSTRAINT pk_rate_limit_counters
    TO rate_limit_counters_pkey;
ALTER TABLE rate_limit_counters
    ALTER COLUMN limiter TYPE varchar(32),
    ALTER COLUMN subject TYPE varchar(128),
    ADD CONSTRAINT rate_limit_counters_attempts_positive CHECK (attempts >= 1);
ALTER INDEX ix_rate_limit_counters_window_start RENAME TO rate_limit_counters_window_start_idx;

DROP TABLE alembic_version;

-- Recorded as this product's first migration, as Diesel records its own.
CREATE TABLE __diesel_schema_migrations (
    version VARCHAR(50) PRIMARY KEY NOT NULL,
    run_on  TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
);
