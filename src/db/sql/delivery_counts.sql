-- How many deliveries are in each state, for the endpoint $1 or for all (NULL), of the
-- project $2 or of every project (NULL), without
-- scanning the history: delivered and failed from the counts the triggers keep (migration
-- delivery_state_counts), pending and processing (the queue) from their partial indexes.
SELECT
    (SELECT count(*) FROM webhook_deliveries
     WHERE state = 'pending' AND ($1::varchar IS NULL OR endpoint_id = $1)
       AND ($2::varchar IS NULL OR endpoint_id IN (SELECT id FROM endpoints WHERE project_id = $2))) AS pending,
    (SELECT count(*) FROM webhook_deliveries
     WHERE state = 'processing' AND ($1::varchar IS NULL OR endpoint_id = $1)
       AND ($2::varchar IS NULL OR endpoint_id IN (SELECT id FROM endpoints WHERE project_id = $2))) AS processing,
    (SELECT coalesce(sum(deliveries), 0)::bigint FROM delivery_state_counts
     WHERE state = 'delivered' AND ($1::varchar IS NULL OR endpoint_id = $1)
       AND ($2::varchar IS NULL OR endpoint_id IN (SELECT id FROM endpoints WHERE project_id = $2))) AS delivered,
    (SELECT coalesce(sum(deliveries), 0)::bigint FROM delivery_state_counts
     WHERE state = 'failed' AND ($1::varchar IS NULL OR endpoint_id = $1)
       AND ($2::varchar IS NULL OR endpoint_id IN (SELECT id FROM endpoints WHERE project_id = $2))) AS failed
