-- Up to $2 finished alerts (sent, or given up) that occurred before $1.
DELETE FROM operator_alerts
WHERE id IN (
    SELECT id FROM operator_alerts
    WHERE next_attempt_at IS NULL AND occurred_at < $1
    ORDER BY id
    LIMIT $2
)
