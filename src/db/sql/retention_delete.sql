-- Deletes up to $4 of the submissions retention takes (after retention_expired.sql).
-- Rows another process is deleting are skipped. Deliveries and attempts stay, their
-- submission_id set to null by the foreign keys; an autoresponder's record of their
-- address goes.
, expired AS (
    SELECT s.id FROM submissions s
    WHERE s.id IN (SELECT c.id FROM candidates c)
    LIMIT $4
    FOR UPDATE OF s SKIP LOCKED
), deleted AS (
    DELETE FROM submissions WHERE id IN (SELECT id FROM expired) RETURNING 1
), forgotten AS (
    -- What an autoresponder kept of the address it answered them at goes with them.
    DELETE FROM autoresponder_recipients WHERE submission_id IN (SELECT id FROM expired)
)
SELECT count(*) AS deleted FROM deleted
