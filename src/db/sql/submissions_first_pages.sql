-- The first $2 submissions (newest first) of each endpoint in $1, in one statement.
SELECT s.id, s.endpoint_id, s.received_at, s.fields, s.idempotency_key
FROM unnest($1::text[]) AS e(id)
CROSS JOIN LATERAL (
    SELECT * FROM submissions x
    WHERE x.endpoint_id = e.id
    ORDER BY x.received_at DESC, x.id DESC
    LIMIT $2
) AS s
