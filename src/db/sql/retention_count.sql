-- How many submissions retention would delete now: received before $1, and no delivery
-- still needs them (no delivery, or a delivered one; a failed one may be replayed).
SELECT count(*) AS expired
FROM submissions s
LEFT JOIN webhook_deliveries d ON d.submission_id = s.id
WHERE s.received_at < $1 AND (d.id IS NULL OR d.state = 'delivered')
