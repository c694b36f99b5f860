-- The first $2 deliveries (newest first) of each endpoint in $1, in one statement.
SELECT d.id, d.submission_id, d.endpoint_id, d.destination_id, d.destination_url, d.state, d.attempts,
       d.cycle_attempts, d.next_attempt_at, d.claim_expires_at, d.created_at, d.completed_at
FROM unnest($1::text[]) AS e(id)
CROSS JOIN LATERAL (
    SELECT * FROM webhook_deliveries w
    WHERE w.endpoint_id = e.id
    ORDER BY w.created_at DESC, w.id DESC
    LIMIT $2
) AS d
