-- The head of an ordered destination's queue: its deliveries not yet delivered or failed,
-- in acceptance order (ordered_head_due, claim.sql, hand_on.sql). Built CONCURRENTLY, as
-- migration destination_due_index explains: a plain build would hold every write to
-- webhook_deliveries while it scans the history.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_open_destination_order_idx
    ON webhook_deliveries (destination_id, created_at, id)
    WHERE state IN ('pending', 'processing');
