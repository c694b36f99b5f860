-- How many deliveries are in each state for each endpoint of $1 (one row per id, zeros for
-- an endpoint without deliveries), counted as delivery_counts.sql counts one endpoint: the
-- queue from its partial indexes, delivered and failed from the trigger-kept counts.
SELECT
    e.id,
    (SELECT count(*) FROM webhook_deliveries
     WHERE state = 'pending' AND endpoint_id = e.id) AS pending,
    (SELECT count(*) FROM webhook_deliveries
     WHERE state = 'processing' AND endpoint_id = e.id) AS processing,
    (SELECT coalesce(sum(deliveries), 0)::bigint FROM delivery_state_counts
     WHERE state = 'delivered' AND endpoint_id = e.id) AS delivered,
    (SELECT coalesce(sum(deliveries), 0)::bigint FROM delivery_state_counts
     WHERE state = 'failed' AND endpoint_id = e.id) AS failed
FROM unnest($1::varchar[]) AS e (id)
