-- The first $2 submissions (newest first) of each endpoint in $1, in one statement: those
-- in the spam folder when $3 is true, the others when false, all when NULL.
SELECT s.id, s.endpoint_id, s.received_at, s.fields, s.idempotency_key, s.spam,
       s.spam_reasons, s.spam_reviewed_at
FROM unnest($1::text[]) AS e(id)
CROSS JOIN LATERAL (
    SELECT * FROM submissions x
    WHERE x.endpoint_id = e.id AND ($3::boolean IS NULL OR x.spam = $3)
    ORDER BY x.received_at DESC, x.id DESC
    LIMIT $2
) AS s
