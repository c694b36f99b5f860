ALTER TABLE submissions
    DROP CONSTRAINT submissions_id_format,
    ADD CONSTRAINT submissions_id_format CHECK (id ~ '^sub_[0-9a-f]{32}$');

ALTER TABLE webhook_deliveries
    DROP CONSTRAINT webhook_deliveries_id_format,
    ADD CONSTRAINT webhook_deliveries_id_format CHECK (id ~ '^whd_[0-9a-f]{32}$'),
    DROP CONSTRAINT webhook_deliveries_claim_token_format,
    ADD CONSTRAINT webhook_deliveries_claim_token_format
        CHECK (claim_token IS NULL OR claim_token ~ '^clm_[0-9a-f]{32}$');

ALTER TABLE delivery_attempts
    DROP CONSTRAINT delivery_attempts_id_format,
    ADD CONSTRAINT delivery_attempts_id_format CHECK (id ~ '^att_[0-9a-f]{32}$');

ALTER TABLE management_api_keys
    DROP CONSTRAINT management_api_keys_id_format,
    ADD CONSTRAINT management_api_keys_id_format CHECK (id ~ '^mk_[0-9a-f]{32}$');
