-- Autoresponders: a destination of kind `autoresponder` sends the operator's fixed
-- confirmation (reply_subject, reply_body) to the one address in the submission's field
-- `reply_to_field`, at most once per address per reply_window_seconds
-- (docs/delivery.md, "Autoresponders"). Its deliveries go through the outbox like any
-- other; intake writes one only when the field holds exactly one plain address and the
-- address had no confirmation from this destination within the window
-- (autoresponder_recipients, below, decided in the same statement).
ALTER TABLE destinations
    DROP CONSTRAINT destinations_kind_valid,
    ADD CONSTRAINT destinations_kind_valid CHECK (kind IN ('webhook', 'email', 'autoresponder')),
    ADD COLUMN reply_subject varchar(200),
    ADD COLUMN reply_body varchar(5000),
    ADD COLUMN reply_window_seconds integer,
    ADD CONSTRAINT destinations_autoresponder_fields CHECK (
        kind <> 'autoresponder'
        OR (url IS NULL AND secret IS NULL AND previous_secret IS NULL AND recipients IS NULL
            AND reply_to_field IS NOT NULL AND reply_subject IS NOT NULL
            AND reply_body IS NOT NULL AND reply_window_seconds IS NOT NULL)),
    ADD CONSTRAINT destinations_reply_only_for_autoresponders CHECK (
        kind = 'autoresponder'
        OR (reply_subject IS NULL AND reply_body IS NULL AND reply_window_seconds IS NULL)),
    ADD CONSTRAINT destinations_reply_window_positive
        CHECK (reply_window_seconds IS NULL OR reply_window_seconds >= 60);

-- Who had a confirmation from an autoresponder, and until when they get no other: one
-- row per destination and address (its MD5, lower-cased: the address itself is not
-- kept here, and erasing the submission leaves nothing of it). A row whose quiet_until
-- has passed is taken over by the next submission from that address.
CREATE TABLE autoresponder_recipients (
    destination_id varchar(36) NOT NULL,
    address_digest varchar(32) NOT NULL,
    quiet_until    timestamptz NOT NULL,
    -- The submission whose confirmation started the quiet time.
    submission_id  varchar(36) NOT NULL,
    CONSTRAINT autoresponder_recipients_pkey PRIMARY KEY (destination_id, address_digest)
);
CREATE INDEX autoresponder_recipients_quiet_until_idx ON autoresponder_recipients (quiet_until);
-- Erasing a submission (and retention) deletes its row.
CREATE INDEX autoresponder_recipients_submission_id_idx ON autoresponder_recipients (submission_id);
