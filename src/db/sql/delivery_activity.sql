-- Deliveries that ended (reached delivered or failed) at or after $2, per minute, for the
-- endpoint $1 or for all (NULL), of the project $3 or of every project (NULL). Read from the event log, whose BRIN index on occurred_at
-- keeps the scan to the window's pages: the cost follows the window's traffic, not the
-- history. An event into a terminal state from another state is one delivery ending; a
-- late attempt recorded on a delivery already delivered is not.
SELECT date_trunc('minute', occurred_at) AS minute,
       count(*) FILTER (WHERE state = 'delivered') AS delivered,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM delivery_events
WHERE occurred_at >= $2
  AND state IN ('delivered', 'failed')
  AND previous_state IS DISTINCT FROM state
  AND ($1::varchar IS NULL OR endpoint_id = $1)
  AND ($3::varchar IS NULL OR endpoint_id IN (SELECT id FROM endpoints WHERE project_id = $3))
GROUP BY 1
ORDER BY 1
