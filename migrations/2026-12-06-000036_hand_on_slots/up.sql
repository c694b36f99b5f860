-- Handing a request slot on: a worker whose request to a destination has ended claims
-- that destination's next due delivery in the transaction that records the attempt
-- (src/db/sql/hand_on.sql, run by the recorder), instead of freeing the slot and waking
-- its claim loop for a claim of its own. One commit per delivery instead of two, and no
-- claim loop between one request to a busy destination and the next.
--
-- Which of the given destinations may be handed slots, and how many: at most the slots
-- being handed on to each (`p_slots`, the attempts of this transaction that took a
-- delivery of it out of `processing`), and never more than its cap allows, so a
-- destination's requests in flight never grow this way. A destination is left to the
-- claim loop (no slot handed on) when its claim lock is held: a claim, a claim at intake
-- or a pause is deciding about it. The lock is taken shared, so that two recorders
-- handing slots of one destination on at once do not turn each other away; a claim and
-- a pause take it exclusively. Paused, removed and throttled destinations get nothing
-- (a throttled destination's rate is kept by the claim alone).
--
-- Counting under the lock: the count of requests in flight is read by a query of its own
-- after the locks (a new snapshot), so it sees every claim committed before them and this
-- transaction's own recording; a concurrent hand-on of another recorder is not seen, but
-- each replaces at most what it finished, so together they cannot pass the cap.
CREATE FUNCTION handable_destinations(p_destinations varchar[], p_slots integer[],
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
