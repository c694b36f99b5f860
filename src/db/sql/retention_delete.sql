-- Deletes up to $2 of the submissions retention_count.sql counts (cutoffs $1 for the
-- inbox and $3 for the spam folder, NULL: none). Rows another
-- process is deleting are skipped. Deliveries and attempts stay, their submission_id set
-- to null by the foreign keys; an autoresponder's record of their address goes.
WITH expired AS (
    SELECT s.id
    FROM submissions s
    WHERE ((NOT s.spam AND s.received_at < $1) OR (s.spam AND s.received_at < $3))
      AND NOT EXISTS (
          SELECT 1 FROM webhook_deliveries d
          WHERE d.submission_id = s.id AND d.state <> 'delivered'
      )
    LIMIT $2
    FOR UPDATE OF s SKIP LOCKED
), deleted AS (
    DELETE FROM submissions WHERE id IN (SELECT id FROM expired) RETURNING 1
), forgotten AS (
    -- What an autoresponder kept of the address it answered them at goes with them.
    DELETE FROM autoresponder_recipients WHERE submission_id IN (SELECT id FROM expired)
)
SELECT count(*) AS deleted FROM deleted
