-- Up to $3 alerts due by $1, oldest first, each leased until $1 + $2 (another sender
-- passes them by until then; one whose sender died is taken again), the attempt counted.
UPDATE operator_alerts a
SET next_attempt_at = $1 + $2, attempts = a.attempts + 1
WHERE a.id IN (
    SELECT d.id FROM operator_alerts d
    WHERE d.next_attempt_at <= $1
    ORDER BY d.next_attempt_at, d.id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
RETURNING a.id, a.event_id, a.kind, a.endpoint_id, a.destination_id, a.reason,
          a.failed_deliveries, a.occurred_at, a.email_sent_at, a.webhook_sent_at, a.attempts
