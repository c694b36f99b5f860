-- For /metrics: how many seconds the oldest due pending delivery has been due, by the
-- database's clock; 0 when nothing is due. Reads the claiming index on pending deliveries.
SELECT coalesce(extract(epoch FROM statement_timestamp() - min(next_attempt_at)), 0)::float8 AS seconds
FROM webhook_deliveries
WHERE state = 'pending' AND next_attempt_at <= statement_timestamp()
