-- Deletes up to $2 of the attempts the DEFAULT partition caught (a worker's clock far
-- off, partitions not made in time) that were made before $1, but none of a delivery
-- still in the queue. Normally the partition is empty and this reads nothing.
WITH gone AS (
    DELETE FROM delivery_attempts_default
    WHERE id IN (SELECT a.id FROM delivery_attempts_default a
                 WHERE a.attempted_at < $1
                   AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                                   WHERE d.id = a.delivery_id
                                     AND d.state IN ('pending', 'processing'))
                 LIMIT $2)
    RETURNING 1
)
SELECT count(*) AS pruned FROM gone
