-- Back to one webhook per endpoint: the first webhook destination's settings were kept
-- on the endpoint rows, which this release does not write; those are what remains.
DROP FUNCTION intake_claim_room(varchar[], timestamptz, integer, integer);
DROP FUNCTION intake_claim_destination_room(varchar[], timestamptz, integer, integer);
DROP FUNCTION claimable_destinations(timestamptz, integer, integer);
DROP FUNCTION throttle_allowance(integer, timestamptz, timestamptz);
DROP FUNCTION throttle_burst();
DROP TABLE destination_throttles;
ALTER TABLE endpoint_events DROP COLUMN destination_id;
DELETE FROM delivery_attempts WHERE outcome IN ('smtp_error', 'unsendable')
    OR delivery_id IN (SELECT id FROM webhook_deliveries WHERE signing_secret IS NULL);
ALTER TABLE delivery_attempts
    DROP COLUMN reply,
    DROP CONSTRAINT delivery_attempts_outcome_valid,
    ADD CONSTRAINT delivery_attempts_outcome_valid CHECK (
        outcome IN ('succeeded', 'http_error', 'timeout', 'network_error', 'blocked_destination')
    );
DELETE FROM webhook_deliveries WHERE signing_secret IS NULL;
ALTER TABLE webhook_deliveries DROP COLUMN destination_id,
    ALTER COLUMN signing_secret SET NOT NULL;
DROP TABLE destinations;

-- The claiming functions as migrations claim_reads_per_endpoint and
-- intake_claim_room_reads_after_lock made them.
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
            -- A range and both columns in the order, so that only
            -- webhook_deliveries_pending_endpoint_due_idx serves it (see the header).
            SELECT w.next_attempt_at AS head FROM webhook_deliveries w
            WHERE w.state = 'pending'
              AND w.endpoint_id >= q.endpoint_id AND w.endpoint_id <= q.endpoint_id
            ORDER BY w.endpoint_id, w.next_attempt_at LIMIT 1
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

CREATE FUNCTION intake_claim_room(p_endpoints varchar[], p_now timestamptz, p_limit integer,
                                  p_cap integer)
RETURNS TABLE (endpoint_id varchar, free_slots integer, webhook_url varchar,
               webhook_secret varchar, previous_secret varchar,
               consecutive_failed_deliveries integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_locked varchar[] := '{}';
    v_endpoint varchar;
BEGIN
    IF p_limit <= 0 OR p_endpoints IS NULL THEN
        RETURN;
    END IF;
    FOREACH v_endpoint IN ARRAY p_endpoints LOOP
        -- 1752788324: "hymd" in ASCII, this service's class of advisory locks.
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_endpoint)) THEN
            v_locked := v_locked || v_endpoint;
            EXIT WHEN cardinality(v_locked) >= p_limit;
        END IF;
    END LOOP;
    -- A new snapshot, taken after the locks: every claim, pause and secret rotation
    -- committed before them is seen (as in claimable_endpoints and the claim).
    RETURN QUERY
    SELECT s.endpoint_id, room.free::integer, e.webhook_url, e.webhook_secret,
           CASE WHEN e.previous_secret_expires_at > p_now THEN e.previous_webhook_secret END,
           e.consecutive_failed_deliveries
    FROM unnest(v_locked) WITH ORDINALITY AS s(endpoint_id, position)
    JOIN endpoints e ON e.id = s.endpoint_id
    CROSS JOIN LATERAL (
        SELECT p_cap - (SELECT count(*) FROM webhook_deliveries w
                        WHERE w.state = 'processing' AND w.endpoint_id = s.endpoint_id) AS free
    ) room
    WHERE room.free > 0
      AND e.paused_at IS NULL AND e.deleted_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
                      WHERE w.state = 'pending' AND w.endpoint_id = s.endpoint_id
                        AND w.next_attempt_at <= p_now)
    ORDER BY s.position;
END
$$;
