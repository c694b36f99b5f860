-- claimable_endpoints as migration endpoint_lifecycle defined it.

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
          -- A paused endpoint's deliveries wait, untouched, until it is resumed.
          AND NOT EXISTS (SELECT 1 FROM endpoints e
                          WHERE e.id = q.endpoint_id AND e.paused_at IS NOT NULL)
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
    -- A new snapshot: every claim committed before the locks were taken is counted, and
    -- a pause committed before (a pause takes the endpoint's lock: db/endpoints.rs) is
    -- seen.
    RETURN QUERY
    SELECT s.endpoint_id,
           greatest(p_cap - (SELECT count(*) FROM webhook_deliveries w
                             WHERE w.state = 'processing' AND w.endpoint_id = s.endpoint_id),
                    0)::integer
    FROM unnest(v_serving) AS s(endpoint_id)
    WHERE NOT EXISTS (SELECT 1 FROM endpoints e
                      WHERE e.id = s.endpoint_id AND e.paused_at IS NOT NULL);
END
$$;

