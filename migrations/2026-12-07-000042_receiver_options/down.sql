-- The room function as migration destinations made it, then the columns.
CREATE OR REPLACE FUNCTION intake_claim_destination_room(p_destinations varchar[], p_now timestamptz,
                                                         p_limit integer, p_cap integer)
RETURNS TABLE (destination_id varchar, free_slots integer, url varchar, secret varchar,
               previous_secret varchar, consecutive_failed_deliveries integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_locked varchar[] := '{}';
    v_destination varchar;
BEGIN
    IF p_limit <= 0 OR p_destinations IS NULL THEN
        RETURN;
    END IF;
    FOREACH v_destination IN ARRAY p_destinations LOOP
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_destination)) THEN
            v_locked := v_locked || v_destination;
            EXIT WHEN cardinality(v_locked) >= p_limit;
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT s.destination_id, room.free::integer, ds.url, ds.secret,
           CASE WHEN ds.previous_secret_expires_at > p_now THEN ds.previous_secret END,
           ds.consecutive_failed_deliveries
    FROM unnest(v_locked) WITH ORDINALITY AS s(destination_id, position)
    JOIN destinations ds ON ds.id = s.destination_id
    CROSS JOIN LATERAL (
        SELECT coalesce(ds.max_in_flight, p_cap)
               - (SELECT count(*) FROM webhook_deliveries w
                  WHERE w.state = 'processing' AND w.destination_id = s.destination_id) AS free
    ) room
    WHERE room.free > 0
      AND ds.paused_at IS NULL AND ds.removed_at IS NULL
      -- A throttled destination's requests start only through the claim, which keeps
      -- its rate; an email is sent from what the claim reads (claim.sql).
      AND ds.max_requests_per_second IS NULL AND ds.kind = 'webhook'
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
                      WHERE w.state = 'pending' AND w.destination_id = s.destination_id
                        AND w.next_attempt_at <= p_now)
    ORDER BY s.position;
END
$$;

ALTER TABLE destinations
    DROP COLUMN body_format,
    DROP COLUMN body_template,
    DROP COLUMN request_headers,
    DROP COLUMN request_auth,
    DROP COLUMN ed25519_key,
    DROP COLUMN retry_policy;
