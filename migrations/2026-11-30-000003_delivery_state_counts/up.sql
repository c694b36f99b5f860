-- Exact delivery counts by endpoint and state without scanning webhook_deliveries, which
-- grows without bound. Statement-level triggers keep the counts in the same transaction as
-- the change; each statement adds to one of 16 shards, chosen at random, so concurrent
-- workers rarely wait on the same counter row. Rows are upserted in (endpoint_id, state)
-- order, so two statements always lock counters in the same order.

CREATE TABLE delivery_state_counts (
    endpoint_id varchar(64) NOT NULL,
    state       varchar(16) NOT NULL,
    shard       smallint    NOT NULL,
    deliveries  bigint      NOT NULL,
    CONSTRAINT delivery_state_counts_pkey PRIMARY KEY (endpoint_id, state, shard),
    CONSTRAINT delivery_state_counts_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id),
    CONSTRAINT delivery_state_counts_shard_range CHECK (shard BETWEEN 0 AND 15)
);

CREATE FUNCTION count_delivery_states() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chosen smallint := floor(random() * 16);
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
        SELECT endpoint_id, state, chosen, count(*)
        FROM new_rows
        GROUP BY endpoint_id, state
        ORDER BY endpoint_id, state
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = delivery_state_counts.deliveries + EXCLUDED.deliveries;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
        SELECT endpoint_id, state, chosen, sum(delta)
        FROM (
            SELECT o.endpoint_id, o.state, -1 AS delta
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE n.state <> o.state OR n.endpoint_id <> o.endpoint_id
            UNION ALL
            SELECT n.endpoint_id, n.state, 1 AS delta
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE n.state <> o.state OR n.endpoint_id <> o.endpoint_id
        ) AS changes
        GROUP BY endpoint_id, state
        HAVING sum(delta) <> 0
        ORDER BY endpoint_id, state
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = delivery_state_counts.deliveries + EXCLUDED.deliveries;
    ELSE
        INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
        SELECT endpoint_id, state, chosen, -count(*)
        FROM old_rows
        GROUP BY endpoint_id, state
        ORDER BY endpoint_id, state
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = delivery_state_counts.deliveries + EXCLUDED.deliveries;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_deliveries_count_inserts
    AFTER INSERT ON webhook_deliveries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_delivery_states();
CREATE TRIGGER webhook_deliveries_count_updates
    AFTER UPDATE ON webhook_deliveries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_delivery_states();
CREATE TRIGGER webhook_deliveries_count_deletes
    AFTER DELETE ON webhook_deliveries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_delivery_states();

INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
SELECT endpoint_id, state, 0, count(*)
FROM webhook_deliveries
GROUP BY endpoint_id, state;
