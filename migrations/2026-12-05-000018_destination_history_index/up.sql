-- A destination's deliveries, newest first: `deliveries(filter: {destinationId})`.
-- (See destination_due_index for why CONCURRENTLY.)
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_destination_created_at_id_idx
    ON webhook_deliveries (destination_id, created_at, id);
