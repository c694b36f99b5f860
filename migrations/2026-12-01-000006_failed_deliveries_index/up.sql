-- The failed deliveries a dashboard pages through, newest first, for all endpoints or for
-- one. Failures are rare in a long history: without these, the page walks the
-- (created_at, id) index through delivered rows until it has found enough failed ones,
-- and on a history where nothing failed it walks all of it. Partial, so only a delivery
-- entering `failed` writes to them (and a replay leaving it); intake and the queue do not.
CREATE INDEX webhook_deliveries_failed_created_at_id_idx
    ON webhook_deliveries (created_at, id) WHERE state = 'failed';
CREATE INDEX webhook_deliveries_failed_endpoint_created_at_id_idx
    ON webhook_deliveries (endpoint_id, created_at, id) WHERE state = 'failed';
