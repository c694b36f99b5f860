DROP TABLE autoresponder_recipients;
DELETE FROM delivery_attempts WHERE delivery_id IN (
    SELECT d.id FROM webhook_deliveries d
    JOIN destinations ds ON ds.id = d.destination_id WHERE ds.kind = 'autoresponder');
DELETE FROM webhook_deliveries WHERE destination_id IN (
    SELECT id FROM destinations WHERE kind = 'autoresponder');
DELETE FROM destinations WHERE kind = 'autoresponder';
ALTER TABLE destinations
    DROP CONSTRAINT destinations_reply_window_positive,
    DROP CONSTRAINT destinations_reply_only_for_autoresponders,
    DROP CONSTRAINT destinations_autoresponder_fields,
    DROP COLUMN reply_window_seconds,
    DROP COLUMN reply_body,
    DROP COLUMN reply_subject,
    DROP CONSTRAINT destinations_kind_valid,
    ADD CONSTRAINT destinations_kind_valid CHECK (kind IN ('webhook', 'email'));
