-- How many failed deliveries a bulk replay with this filter would take (the conditions of
-- replay_matching.sql, without its `now`: $1 endpoint, $2 and $3 failed after and before,
-- $4 and $5 created after and before, $6 retarget, $7 destination), changing nothing.
SELECT count(*)
FROM webhook_deliveries d
CROSS JOIN LATERAL (
    SELECT coalesce(d.destination_id,
                    (SELECT ds.id FROM destinations ds
                     WHERE ds.endpoint_id = d.endpoint_id AND ds.position = 1
                       AND ds.kind = 'webhook' AND ds.created_at <= d.created_at))
               AS destination_id
) t
WHERE d.state = 'failed' AND d.submission_id IS NOT NULL
  AND ($1::varchar IS NULL OR d.endpoint_id = $1)
  AND ($2::timestamptz IS NULL OR d.completed_at > $2)
  AND ($3::timestamptz IS NULL OR d.completed_at < $3)
  AND ($4::timestamptz IS NULL OR d.created_at > $4)
  AND ($5::timestamptz IS NULL OR d.created_at < $5)
  -- History recorded before destinations matches its upgraded webhook (t).
  AND ($7::varchar IS NULL OR d.destination_id = $7
       OR (d.destination_id IS NULL AND t.destination_id = $7))
  AND EXISTS (SELECT 1 FROM destinations ds
              JOIN endpoints e ON e.id = ds.endpoint_id
              WHERE ds.id = t.destination_id AND e.deleted_at IS NULL
                AND (NOT $6::boolean OR ds.removed_at IS NULL))
