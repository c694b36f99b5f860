-- How many failed deliveries a bulk replay with this filter would take (the WHERE of
-- replay_matching.sql, binds numbered alike), changing nothing.
SELECT count(*)
FROM webhook_deliveries
WHERE state = 'failed' AND submission_id IS NOT NULL
  AND ($1::varchar IS NULL OR endpoint_id = $1)
  AND ($2::timestamptz IS NULL OR completed_at > $2)
  AND ($3::timestamptz IS NULL OR completed_at < $3)
  AND ($4::timestamptz IS NULL OR created_at > $4)
  AND ($5::timestamptz IS NULL OR created_at < $5)
      AND NOT EXISTS (SELECT 1 FROM endpoints e
                      WHERE e.id = webhook_deliveries.endpoint_id AND e.deleted_at IS NOT NULL)
