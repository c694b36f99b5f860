-- Terminal-state counts (delivery_state_counts) kept per statement instead of per row.
--
-- The row triggers of migration delivery_state_counts added ±1 to a shard chosen at random
-- for each row. A statement recording several deliveries of one endpoint therefore locked
-- several counter rows of that endpoint in a random order, and two recorders doing so at
-- once could each hold a row the other wanted: a deadlock, which PostgreSQL resolves by
-- failing one batch (its attempts are then recorded one by one). With one busy
-- destination, every batch is such a batch. Now each statement sums its changes by
-- endpoint and state and adds them to one shard, chosen once per statement, in the order
-- of (endpoint, state): two statements either use different counter rows or lock the same
-- ones in the same order, so they can wait on each other but never deadlock. And a batch
-- of n deliveries costs one upsert per endpoint and state, not n.
--
-- Transition tables cannot be combined with a column list or a WHEN condition, so the
-- update trigger now runs for every UPDATE statement on the table; for a statement that
-- moves nothing into or out of a terminal state (a claim) it reads its few rows and
-- writes nothing.

CREATE FUNCTION count_terminal_delivery_states_per_statement() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    chosen smallint := floor(random() * 16);
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO delivery_state_counts AS c (endpoint_id, state, shard, deliveries)
        SELECT n.endpoint_id, n.state, chosen, count(*)
        FROM new_rows n
        WHERE n.state IN ('delivered', 'failed')
        GROUP BY n.endpoint_id, n.state
        ORDER BY n.endpoint_id, n.state
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = c.deliveries + excluded.deliveries;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO delivery_state_counts AS c (endpoint_id, state, shard, deliveries)
        SELECT o.endpoint_id, o.state, chosen, -count(*)
        FROM old_rows o
        WHERE o.state IN ('delivered', 'failed')
        GROUP BY o.endpoint_id, o.state
        ORDER BY o.endpoint_id, o.state
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = c.deliveries + excluded.deliveries;
    ELSE
        -- An UPDATE: rows are matched by id (the primary key, never changed by an UPDATE
        -- of this service). A row that stays in the same state of the same endpoint adds
        -- nothing; the sum of each (endpoint, state) may be zero and is then not written.
        INSERT INTO delivery_state_counts AS c (endpoint_id, state, shard, deliveries)
        SELECT d.endpoint_id, d.state, chosen, sum(d.change)
        FROM (
            SELECT o.endpoint_id, o.state, -1 AS change
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.state IN ('delivered', 'failed')
              AND (o.state IS DISTINCT FROM n.state OR o.endpoint_id IS DISTINCT FROM n.endpoint_id)
            UNION ALL
            SELECT n.endpoint_id, n.state, 1 AS change
            FROM new_rows n JOIN old_rows o ON o.id = n.id
            WHERE n.state IN ('delivered', 'failed')
              AND (o.state IS DISTINCT FROM n.state OR o.endpoint_id IS DISTINCT FROM n.endpoint_id)
        ) d
        GROUP BY d.endpoint_id, d.state
        HAVING sum(d.change) <> 0
        ORDER BY d.endpoint_id, d.state
        ON CONFLICT (endpoint_id, state, shard)
        DO UPDATE SET deliveries = c.deliveries + excluded.deliveries;
    END IF;
    RETURN NULL;
END
$$;

-- One transaction: the old triggers and the new ones swap atomically, so no change is
-- counted twice or missed (the DROP and CREATE take a short SHARE ROW EXCLUSIVE lock).
DROP TRIGGER webhook_deliveries_count_terminal_inserts ON webhook_deliveries;
DROP TRIGGER webhook_deliveries_count_terminal_updates ON webhook_deliveries;
DROP TRIGGER webhook_deliveries_count_terminal_deletes ON webhook_deliveries;
DROP FUNCTION count_terminal_delivery_states();

CREATE TRIGGER webhook_deliveries_count_terminal_inserts
    AFTER INSERT ON webhook_deliveries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_terminal_delivery_states_per_statement();
CREATE TRIGGER webhook_deliveries_count_terminal_updates
    AFTER UPDATE ON webhook_deliveries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_terminal_delivery_states_per_statement();
CREATE TRIGGER webhook_deliveries_count_terminal_deletes
    AFTER DELETE ON webhook_deliveries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_terminal_delivery_states_per_statement();
