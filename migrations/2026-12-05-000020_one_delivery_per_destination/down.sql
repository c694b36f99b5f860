-- Back to one delivery per submission: of a submission's deliveries the oldest stays
-- (its first destination's), the others go with their attempts.
CREATE TEMPORARY TABLE later_deliveries ON COMMIT DROP AS
    SELECT d.id FROM webhook_deliveries d
    WHERE EXISTS (
        SELECT 1 FROM webhook_deliveries o
        WHERE o.submission_id = d.submission_id AND (o.created_at, o.id) < (d.created_at, d.id)
    );
DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM later_deliveries);
DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM later_deliveries);
ALTER TABLE webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_submission_id_unique UNIQUE (submission_id);
