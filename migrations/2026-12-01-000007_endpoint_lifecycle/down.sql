-- Without these columns a deleted endpoint would come back as an ordinary one, and its
-- cancelled deliveries would be replayable to its old receiver: refuse while there is one.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM endpoints WHERE deleted_at IS NOT NULL) THEN
        RAISE EXCEPTION 'endpoints deleted with their history kept exist: erase them (deleteEndpoint with history: ERASE) before reverting this migration';
    END IF;
END
$$;
DELETE FROM delivery_events WHERE kind = 'cancelled';
ALTER TABLE delivery_events DROP CONSTRAINT delivery_events_kind;
ALTER TABLE delivery_events ADD CONSTRAINT delivery_events_kind CHECK (kind IN ('created',
    'claimed', 'attempt_recorded', 'late_attempt_recorded', 'replayed', 'handed_back',
    'failed_without_attempt'));
DROP TABLE endpoint_events;
ALTER TABLE endpoints
    DROP COLUMN previous_webhook_secret,
    DROP COLUMN previous_secret_expires_at,
    DROP COLUMN paused_at,
    DROP COLUMN pause_reason,
    DROP COLUMN consecutive_failed_deliveries,
    DROP COLUMN deleted_at;
CREATE OR REPLACE FUNCTION claimable_endpoints(p_now timestamptz, p_limit integer, p_cap integer)
RETURNS TABLE (endpoint_id varchar, free_slots integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_serving varchar[] := '{}';
    v_endpoint varchar;
BEGIN
    FOR v_endpoint IN
        -- Every endpoint with a pending delivery: a skip scan of the index, one probe per
        -- endpoint however long its queue.
        WITH RECURSIVE queued(endpoint_id) AS (
            (SELECT w.endpoint_id FROM webhook_deliveries w
             WHERE w.state = 'pending'
             ORDER BY w.endpoint_id LIMIT 1)
            UNION ALL
            SELECT (SELECT w.endpoint_id FROM webhook_deliveries w
                    WHERE w.state = 'pending' AND w.endpoint_id > q.endpoint_id
                    ORDER BY w.endpoint_id LIMIT 1)
            FROM queued q
            WHERE q.endpoint_id IS NOT NULL
        )
        SELECT q.endpoint_id
        FROM queued q
        CROSS JOIN LATERAL (
            SELECT w.next_attempt_at AS head FROM webhook_deliveries w
            WHERE w.state = 'pending' AND w.endpoint_id = q.endpoint_id
            ORDER BY w.next_attempt_at LIMIT 1
        ) h
        WHERE q.endpoint_id IS NOT NULL
          AND h.head <= p_now
          -- A first look at the room (this snapshot may be stale); exact below.
          AND (SELECT count(*) FROM webhook_deliveries w
               WHERE w.state = 'processing' AND w.endpoint_id = q.endpoint_id) < p_cap
        ORDER BY h.head
    LOOP
        -- 1752788324: "hymd" in ASCII, this service's class of advisory locks.
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_endpoint)) THEN
            v_serving := v_serving || v_endpoint;
            EXIT WHEN cardinality(v_serving) >= p_limit;
        END IF;
    END LOOP;
    -- A new snapshot: every claim committed before the locks were taken is counted.
    RETURN QUERY
    SELECT s.endpoint_id,
           greatest(p_cap - (SELECT count(*) FROM webhook_deliveries w
                             WHERE w.state = 'processing' AND w.endpoint_id = s.endpoint_id),
                    0)::integer
    FROM unnest(v_serving) AS s(endpoint_id);
END
$$;
