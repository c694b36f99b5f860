-- Exact delivery counts by endpoint and state without scanning webhook_deliveries, which
-- grows without bound.
--
-- Terminal states (delivered, failed) are counted in delivery_state_counts by row-level
-- triggers that fire only when a row enters or leaves a terminal state: once per delivered
-- or failed delivery, and once per replay. Accepting a submission and claiming a delivery
-- fire nothing, so the hot paths do not pay for the counts. Pending and processing rows are
-- few (the queue, not the history) and are counted from the two partial indexes below.
-- Each change adds to one of 16 shards chosen at random, so concurrent workers rarely wait
-- on the same counter row.

CREATE TABLE delivery_state_counts (
    endpoint_id varchar(64) NOT NULL,
    state       varchar(16) NOT NULL,
    shard       smallint    NOT NULL,
    deliveries  bigint      NOT NULL,
    CONSTRAINT delivery_state_counts_pkey PRIMARY KEY (endpoint_id, state, shard),
    CONSTRAINT delivery_state_counts_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id),
    CONSTRAINT delivery_state_counts_terminal_state CHECK (state IN ('delivered', 'failed')),
    CONSTRAINT delivery_state_counts_shard_range CHECK (shard BETWEEN 0 AND 15)
);

CREATE FUNCTION count_terminal_delivery_states() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chosen smallint := floor(random() * 16);
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state IN ('delivered', 'failed') THEN
        INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
        VALUES (OLD.endpoint_id, OLD.state, chosen, -1)
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = delivery_state_counts.deliveries - 1;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state IN ('delivered', 'failed') THEN
        INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
        VALUES (NEW.endpoint_id, NEW.state, chosen, 1)
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = delivery_state_counts.deliveries + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_deliveries_count_terminal_inserts
    AFTER INSERT ON webhook_deliveries
    FOR EACH ROW WHEN (NEW.state IN ('delivered', 'failed'))
    EXECUTE FUNCTION count_terminal_delivery_states();
CREATE TRIGGER webhook_deliveries_count_terminal_updates
    AFTER UPDATE OF state, endpoint_id ON webhook_deliveries
    FOR EACH ROW WHEN (
        (OLD.state IS DISTINCT FROM NEW.state OR OLD.endpoint_id IS DISTINCT FROM NEW.endpoint_id)
        AND (OLD.state IN ('delivered', 'failed') OR NEW.state IN ('delivered', 'failed'))
    )
    EXECUTE FUNCTION count_terminal_delivery_states();
CREATE TRIGGER webhook_deliveries_count_terminal_deletes
    AFTER DELETE ON webhook_deliveries
    FOR EACH ROW WHEN (OLD.state IN ('delivered', 'failed'))
    EXECUTE FUNCTION count_terminal_delivery_states();

-- The queue's states, counted per endpoint by index-only scans.
CREATE INDEX webhook_deliveries_pending_endpoint_idx
    ON webhook_deliveries (endpoint_id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_processing_endpoint_idx
    ON webhook_deliveries (endpoint_id) WHERE state = 'processing';

INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
SELECT endpoint_id, state, 0, count(*)
FROM webhook_deliveries
WHERE state IN ('delivered', 'failed')
GROUP BY endpoint_id, state;
