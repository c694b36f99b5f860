-- Fair claiming: one endpoint's backlog no longer sits in front of everyone else's, and no
-- endpoint has more than a configured number of requests in flight across all workers.
--
-- The claim statement (src/db/sql/claim.sql) asks `claimable_endpoints` which endpoints it
-- may take from and how many each. The function holds each endpoint it returns under a
-- transaction-scoped advisory lock, so at most one claim at a time takes from an endpoint,
-- and it counts that endpoint's deliveries in flight only after the lock is held: a
-- VOLATILE function reads with a fresh snapshot per statement, so the count includes
-- every claim committed by whoever held the lock before. The cap is exact across
-- processes.

-- Per endpoint, the pending deliveries in due order: finding each endpoint's oldest due
-- delivery, and its queue, is an index probe. (It replaces the endpoint-only index the
-- queue counts read, which this one serves as well.)
DROP INDEX webhook_deliveries_pending_endpoint_idx;
CREATE INDEX webhook_deliveries_pending_endpoint_due_idx
    ON webhook_deliveries (endpoint_id, next_attempt_at) WHERE state = 'pending';

-- Endpoints with a delivery due at p_now and room under p_cap, oldest due delivery first
-- (so the endpoint that has waited longest is served first), at most p_limit of them, each
-- locked for the rest of the transaction; with how many more requests each may start.
-- Endpoints another claim holds right now are skipped: that claim is serving them.
CREATE FUNCTION claimable_endpoints(p_now timestamptz, p_limit integer, p_cap integer)
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
