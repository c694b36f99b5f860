-- Claiming at intake: when the accepting process's own worker has a free request slot and
-- nothing else due, intake writes a new delivery already claimed by it (state
-- `processing`, a token and a lease) in the transaction that writes the submission, so
-- the request can go out right after that one commit instead of after a second, the
-- claim's (docs/delivery.md). The claim follows the rules of every other claim: the
-- endpoint's claim lock (the advisory lock `claimable_endpoints` and a pause take), its
-- cap on requests in flight, never while it is paused or deleted, and never ahead of a
-- delivery of the same endpoint that is due already.
--
-- Answers, of `p_endpoints` (in the batch's order), those whose claim lock it got and
-- that have room now, with how many requests each may start: at most `p_limit`
-- endpoints. The locks are held until the calling transaction ends; try-locks only, so
-- intake never waits on a claim, a claim never waits on intake (it skips the endpoint
-- and is woken again by the commit), and no lock order can cycle.
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
        -- 1752788324: "hymd" in ASCII, this service's class of advisory locks.
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_endpoint)) THEN
            v_locked := v_locked || v_endpoint;
            EXIT WHEN cardinality(v_locked) >= p_limit;
        END IF;
    END LOOP;
    -- A new snapshot, taken after the locks: every claim and pause committed before them
    -- is seen (as in claimable_endpoints).
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
