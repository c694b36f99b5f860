-- The functions as the migrations before made them, then the column.
CREATE OR REPLACE FUNCTION claimable_destinations(p_now timestamptz, p_limit integer, p_cap integer)
RETURNS TABLE (destination_id varchar, free_slots integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_serving varchar[] := '{}';
    v_destination varchar;
BEGIN
    FOR v_destination IN
        WITH RECURSIVE queued(destination_id) AS (
            (SELECT w.destination_id FROM webhook_deliveries w
             WHERE w.state = 'pending' AND w.destination_id IS NOT NULL
             ORDER BY w.destination_id LIMIT 1)
            UNION ALL
            SELECT (SELECT w.destination_id FROM webhook_deliveries w
                    WHERE w.state = 'pending' AND w.destination_id > q.destination_id
                    ORDER BY w.destination_id LIMIT 1)
            FROM queued q
            WHERE q.destination_id IS NOT NULL
        )
        SELECT q.destination_id
        FROM queued q
        CROSS JOIN LATERAL (
            SELECT w.next_attempt_at AS head FROM webhook_deliveries w
            WHERE w.state = 'pending'
              AND w.destination_id >= q.destination_id AND w.destination_id <= q.destination_id
            ORDER BY w.destination_id, w.next_attempt_at LIMIT 1
        ) h
        JOIN destinations ds ON ds.id = q.destination_id
        WHERE q.destination_id IS NOT NULL
          AND h.head <= p_now
          -- A paused destination's deliveries wait, untouched, until it is resumed.
          AND ds.paused_at IS NULL
          -- A throttled destination whose next request may not start yet waits too.
          AND (ds.max_requests_per_second IS NULL
               OR throttle_allowance(ds.max_requests_per_second,
                                     (SELECT t.next_at FROM destination_throttles t
                                      WHERE t.destination_id = ds.id), p_now) > 0)
          -- A first look at the room (this snapshot may be stale); exact below.
          AND (SELECT count(*) FROM webhook_deliveries w
               WHERE w.state = 'processing' AND w.destination_id = q.destination_id)
              < coalesce(ds.max_in_flight, p_cap)
        ORDER BY h.head
    LOOP
        -- 1752788324: "hymd" in ASCII, this service's class of advisory locks.
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_destination)) THEN
            v_serving := v_serving || v_destination;
            EXIT WHEN cardinality(v_serving) >= p_limit;
        END IF;
    END LOOP;
    -- A new snapshot: every claim committed before the locks were taken is counted, and a
    -- pause committed before (a pause takes the destination's lock) is seen, as is the
    -- throttle state the last claim of a throttled destination left (claims of one
    -- destination hold its lock in turn, so its rate holds across processes).
    RETURN QUERY
    SELECT s.destination_id,
           greatest(least(coalesce(ds.max_in_flight, p_cap)
                          - (SELECT count(*) FROM webhook_deliveries w
                             WHERE w.state = 'processing'
                               AND w.destination_id = s.destination_id),
                          throttle_allowance(ds.max_requests_per_second,
                                             (SELECT t.next_at FROM destination_throttles t
                                              WHERE t.destination_id = ds.id), p_now)),
                    0)::integer
    FROM unnest(v_serving) AS s(destination_id)
    JOIN destinations ds ON ds.id = s.destination_id
    WHERE ds.paused_at IS NULL;
END
$$;

CREATE OR REPLACE FUNCTION handable_destinations(p_destinations varchar[], p_slots integer[],
                                      p_cap integer)
RETURNS TABLE (destination_id varchar, free_slots integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_locked varchar[] := '{}';
    v_slots integer[] := '{}';
    v_at integer;
BEGIN
    IF p_destinations IS NULL THEN
        RETURN;
    END IF;
    FOR v_at IN 1 .. cardinality(p_destinations) LOOP
        -- 1752788324: "hymd" in ASCII, this service's class of advisory locks.
        IF p_slots[v_at] > 0
           AND pg_try_advisory_xact_lock_shared(1752788324, hashtext(p_destinations[v_at])) THEN
            v_locked := v_locked || p_destinations[v_at];
            v_slots := v_slots || p_slots[v_at];
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT s.destination_id,
           greatest(least(s.slots,
                          coalesce(ds.max_in_flight, p_cap)
                          - (SELECT count(*) FROM webhook_deliveries w
                             WHERE w.state = 'processing'
                               AND w.destination_id = s.destination_id)),
                    0)::integer
    FROM unnest(v_locked, v_slots) AS s(destination_id, slots)
    JOIN destinations ds ON ds.id = s.destination_id
    WHERE ds.paused_at IS NULL AND ds.removed_at IS NULL
      AND ds.max_requests_per_second IS NULL;
END
$$;

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

DROP FUNCTION ordered_head_due(varchar, timestamptz);
DROP FUNCTION destination_cap(boolean, integer, integer);
ALTER TABLE destinations DROP COLUMN ordered;
