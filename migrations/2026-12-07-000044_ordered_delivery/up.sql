-- Ordered delivery (docs/delivery.md, "Ordered delivery"): a destination that asks for it
-- is sent its deliveries one at a time, in the order their submissions were accepted
-- (created_at, which is the submission's received_at, then the id); the next waits until
-- the one before it is delivered or failed. Only the claims decide what starts, so only
-- they change: a claim serves an ordered destination only when its head is due, and then
-- that head alone (claim.sql, hand_on.sql); its cap is one request in flight; intake
-- leaves it to the workers' claim.
ALTER TABLE destinations ADD COLUMN ordered boolean NOT NULL DEFAULT false;

-- A destination's cap on requests in flight: one when ordered, else its own or the
-- workers' default. One expression, so PostgreSQL inlines it.
CREATE FUNCTION destination_cap(p_ordered boolean, p_max_in_flight integer, p_cap integer)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_ordered THEN 1 ELSE coalesce(p_max_in_flight, p_cap) END
$$;

-- Whether an ordered destination's head (its oldest delivery not yet delivered or failed,
-- in acceptance order: webhook_deliveries_open_destination_order_idx) is pending and due.
-- One in flight, or waiting for its retry, holds every delivery behind it.
CREATE FUNCTION ordered_head_due(p_destination varchar, p_now timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce((
        SELECT w.state = 'pending' AND w.next_attempt_at <= p_now
        FROM webhook_deliveries w
        WHERE w.state IN ('pending', 'processing')
          AND w.destination_id >= p_destination AND w.destination_id <= p_destination
        ORDER BY w.destination_id, w.created_at, w.id
        LIMIT 1), false)
$$;

-- As migration destinations made it, with the ordered destinations' cap and head.
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
              < destination_cap(ds.ordered, ds.max_in_flight, p_cap)
          -- An ordered destination is served only when the head of its queue, in
          -- acceptance order, is due (claim.sql takes that one alone).
          AND (NOT ds.ordered OR ordered_head_due(q.destination_id, p_now))
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
           greatest(least(destination_cap(ds.ordered, ds.max_in_flight, p_cap)
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

-- As migration hand_on_slots made it, with the ordered destinations' cap.
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
                          destination_cap(ds.ordered, ds.max_in_flight, p_cap)
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

-- Intake claims only a plain webhook's first delivery (what its statement returns is the
-- URL and the secrets); a destination with a chat format or a template, headers, an
-- authentication, an Ed25519 key, a retry schedule of its own, a client certificate or
-- CA (migrations receiver_options and receiver_credentials), or ordered, is claimed by the
-- workers' claim, which reads them (claim_take.sql). As in migration destinations, but
-- for those conditions.
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
      AND ds.body_format = 'standard' AND ds.body_template IS NULL
      AND ds.request_headers = '[]' AND ds.request_auth IS NULL
      AND ds.ed25519_key IS NULL AND ds.retry_policy IS NULL
      AND ds.client_certificate IS NULL AND ds.client_ca IS NULL
      AND NOT ds.ordered
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
                      WHERE w.state = 'pending' AND w.destination_id = s.destination_id
                        AND w.next_attempt_at <= p_now)
    ORDER BY s.position;
END
$$;
