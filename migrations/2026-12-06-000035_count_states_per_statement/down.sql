DROP TRIGGER webhook_deliveries_count_terminal_inserts ON webhook_deliveries;
DROP TRIGGER webhook_deliveries_count_terminal_updates ON webhook_deliveries;
DROP TRIGGER webhook_deliveries_count_terminal_deletes ON webhook_deliveries;
DROP FUNCTION count_terminal_delivery_states_per_statement();

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
