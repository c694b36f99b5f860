-- Hands request slots on (migration hand_on_slots): in the transaction that recorded
-- attempts, claims the next due deliveries of the destinations those attempts finished,
-- at most one per slot handed on and within each destination's cap, then as a claim
-- does (claim_take.sql). Leases that ran out are left to the claim loop.
--
-- $1 now (NULL: the database's clock), $2 lease, $3 requests in flight allowed per
-- destination (unless the destination sets its own), $4 the destinations, $5 the slots
-- handed on to each.
WITH expired AS MATERIALIZED (
    SELECT NULL::varchar AS id, NULL::varchar AS state WHERE false
), serving AS MATERIALIZED (
    SELECT s.destination_id, s.free_slots
    FROM handable_destinations($4, $5, $3) AS s
), due AS MATERIALIZED (
    -- Each destination's head of the queue (webhook_deliveries_pending_destination_due_idx,
    -- matched as a range for the reason claim.sql gives), locked as it is read: two
    -- recorders handing slots of one destination on at once each skip the rows the other
    -- locked and take the next ones, rather than both aiming at the same few.
    SELECT h.id, h.state
    FROM serving s
    JOIN destinations ds ON ds.id = s.destination_id
    CROSS JOIN LATERAL (
        SELECT w.id, w.state FROM webhook_deliveries w
        WHERE NOT ds.ordered
          AND w.state = 'pending'
          AND w.destination_id >= s.destination_id AND w.destination_id <= s.destination_id
          AND w.next_attempt_at <= coalesce($1, statement_timestamp())
        ORDER BY w.destination_id, w.next_attempt_at
        LIMIT s.free_slots
        FOR UPDATE SKIP LOCKED
    ) h
    UNION ALL
    -- An ordered destination's head in acceptance order, when it is pending and due; read
    -- first and locked after, so that a head someone else holds is skipped, never the
    -- delivery behind it taken in its place.
    SELECT l.id, l.state FROM (
    SELECT w.id, w.state
    FROM webhook_deliveries w
    WHERE w.id = ANY (ARRAY(
            SELECT o.id
            FROM serving s
            JOIN destinations ds ON ds.id = s.destination_id
            CROSS JOIN LATERAL (
                SELECT w2.id, w2.state, w2.next_attempt_at
                FROM webhook_deliveries w2
                WHERE ds.ordered
                  AND w2.state IN ('pending', 'processing')
                  AND w2.destination_id >= s.destination_id
                  AND w2.destination_id <= s.destination_id
                ORDER BY w2.destination_id, w2.created_at, w2.id
                LIMIT 1
            ) o
            WHERE o.state = 'pending' AND o.next_attempt_at <= coalesce($1, statement_timestamp())))
      AND w.state = 'pending'
    FOR UPDATE SKIP LOCKED
    ) l
)
