-- A submission has one delivery per destination. History rows keep a NULL destination,
-- and NULLs are distinct, so the old rows satisfy it as they are. (See
-- destination_due_index for why CONCURRENTLY.)
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_submission_destination_unique
    ON webhook_deliveries (submission_id, destination_id);
