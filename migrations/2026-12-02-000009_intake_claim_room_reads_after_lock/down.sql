DROP FUNCTION intake_claim_room(varchar[], timestamptz, integer, integer);

-- As migration claim_at_intake made it.
CREATE FUNCTION intake_claim_room(p_endpoints varchar[], p_now timestamptz, p_limit integer,
                                  p_cap integer)
RETURNS TABLE (endpoint_id varchar, free_slots integer)
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
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_endpoint)) THEN
            v_locked := v_locked || v_endpoint;
            EXIT WHEN cardinality(v_locked) >= p_limit;
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT s.endpoint_id, room.free::integer
    FROM unnest(v_locked) WITH ORDINALITY AS s(endpoint_id, position)
    CROSS JOIN LATERAL (
        SELECT p_cap - (SELECT count(*) FROM webhook_deliveries w
                        WHERE w.state = 'processing' AND w.endpoint_id = s.endpoint_id) AS free
    ) room
    WHERE room.free > 0
      AND NOT EXISTS (SELECT 1 FROM endpoints e
                      WHERE e.id = s.endpoint_id
                        AND (e.paused_at IS NOT NULL OR e.deleted_at IS NOT NULL))
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
                      WHERE w.state = 'pending' AND w.endpoint_id = s.endpoint_id
                        AND w.next_attempt_at <= p_now)
    ORDER BY s.position;
END
$$;
