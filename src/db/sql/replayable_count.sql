-- How many failed deliveries a bulk replay with this filter would take (the conditions of
-- replay_matching.sql, without its `now`: $1 endpoint, $2 and $3 failed after and before,
-- $4 and $5 created after and before, $6 retarget), changing nothing.
SELECT count(*)
FROM webhook_deliveries
WHERE state = 'failed' AND submission_id IS NOT NULL
  AND ($1::varchar IS NULL OR endpoint_id = $1)
  AND ($2::timestamptz IS NULL OR completed_at > $2)
  AND ($3::timestamptz IS NULL OR completed_at < $3)
  AND ($4::timestamptz IS NULL OR created_at > $4)
  AND ($5::timestamptz IS NULL OR created_at < $5)
  AND EXISTS (SELECT 1 FROM endpoints e
              WHERE e.id = webhook_deliveries.endpoint_id AND e.deleted_at IS NULL
                AND (NOT $6::boolean OR e.webhook_url IS NOT NULL))
