-- Deliveries in flight per destination: the in-flight cap. (See
-- destination_due_index for why CONCURRENTLY.)
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_processing_destination_idx
    ON webhook_deliveries (destination_id) WHERE state = 'processing';
