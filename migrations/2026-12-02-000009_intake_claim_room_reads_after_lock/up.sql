-- Claiming at intake signs with what the endpoint has after the claim lock.
--
-- intake_claim_room (migration claim_at_intake) now also answers, for each endpoint with
-- room, its URL, live secrets and run of failed deliveries as they are after the lock (a
-- new snapshot, as a worker's claim reads them): a delivery is claimed only when it goes
-- to that URL, and is signed with those secrets, never with what the outbox statement's
-- own, earlier snapshot saw.
DROP FUNCTION intake_claim_room(varchar[], timestamptz, integer, integer);

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
