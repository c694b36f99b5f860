DROP FUNCTION claimable_endpoints(timestamptz, integer, integer);
DROP INDEX webhook_deliveries_pending_endpoint_due_idx;
CREATE INDEX webhook_deliveries_pending_endpoint_idx
    ON webhook_deliveries (endpoint_id) WHERE state = 'pending';
