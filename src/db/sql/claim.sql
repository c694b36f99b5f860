-- Claims up to $3 deliveries in one statement (one transaction that ends with it: no
-- transaction stays open while the requests are made). Every claim gets a fresh token
-- and a lease; the counters stay as they are.
--
-- Deliveries whose lease ran out come first (they are in flight already, so they need no
-- room under the cap). Then pending deliveries that are due, taken from the destinations
-- `claimable_destinations` hands this claim (see migrations fair_claiming and
-- destinations): at most their free slots from each, and round by round, first the
-- oldest due delivery of every destination, then the second of each, so no destination's
-- backlog sits in front of another's.
--
-- $1 now (NULL: the database's clock), $2 lease (interval), $3 how many, $4 requests in
-- flight allowed per destination (unless the destination sets its own)
--
-- Every step reads only the rows it claims or looks at, never the whole queue: the
-- statement runs on a generic plan (its parameters unknown to the planner), and written
-- plainly (`IN (subquery)`, `UPDATE … FROM`, `endpoint_id = …` with `ORDER BY
-- next_attempt_at`) that plan hashed or scanned every pending delivery on each claim:
-- 25 ms a claim with 8,000 queued (docs/BENCHMARKS.md). Hence the id arrays
-- (`= ANY (ARRAY(…))`, an index probe per id) and the per-destination range below.
WITH expired AS MATERIALIZED (
    SELECT w.id, w.state FROM webhook_deliveries w
    WHERE w.state = 'processing' AND w.claim_expires_at <= coalesce($1, statement_timestamp())
      -- A paused destination's deliveries wait, even those whose lease ran out.
      AND NOT EXISTS (SELECT 1 FROM destinations ds
                      WHERE ds.id = w.destination_id AND ds.paused_at IS NOT NULL)
    ORDER BY w.claim_expires_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), serving AS MATERIALIZED (
    SELECT s.destination_id, s.free_slots
    FROM claimable_destinations(coalesce($1, statement_timestamp()), $3, $4) AS s
)
, candidates AS (
    SELECT c.id, c.next_attempt_at, c.turn
    FROM serving s
    JOIN destinations ds ON ds.id = s.destination_id
    CROSS JOIN LATERAL (
        -- This destination's head of the queue, read from
        -- webhook_deliveries_pending_destination_due_idx. The destination is matched as a
        -- range (`>=` and `<=`: for a deterministic collation the same rows as `=`) and the
        -- order names both of that index's columns, because with `=` a generic plan may
        -- read webhook_deliveries_pending_due_idx in due order instead and filter out every
        -- other destination's due deliveries (thousands per destination with a backlog);
        -- with the range, only the per-destination index gives this order without a sort.
        -- `ROWS`: the numbering reads no row past the limit (with the default `RANGE`
        -- frame it reads every delivery due at the same instant, such as a replay's).
        SELECT w.id, w.next_attempt_at,
               row_number() OVER (ORDER BY w.destination_id, w.next_attempt_at
                                  ROWS UNBOUNDED PRECEDING) AS turn
        FROM webhook_deliveries w
        WHERE NOT ds.ordered
          AND w.state = 'pending'
          AND w.destination_id >= s.destination_id AND w.destination_id <= s.destination_id
          AND w.next_attempt_at <= coalesce($1, statement_timestamp())
        ORDER BY w.destination_id, w.next_attempt_at
        LIMIT s.free_slots
    ) c
    UNION ALL
    -- An ordered destination's head in acceptance order
    -- (webhook_deliveries_open_destination_order_idx), when it is pending and due: one in
    -- flight or waiting for its retry holds the rest, however due they are.
    SELECT h.id, h.next_attempt_at, 1
    FROM serving s
    JOIN destinations ds ON ds.id = s.destination_id
    CROSS JOIN LATERAL (
        SELECT w.id, w.state, w.next_attempt_at
        FROM webhook_deliveries w
        WHERE ds.ordered
          AND w.state IN ('pending', 'processing')
          AND w.destination_id >= s.destination_id AND w.destination_id <= s.destination_id
        ORDER BY w.destination_id, w.created_at, w.id
        LIMIT 1
    ) h
    WHERE h.state = 'pending' AND h.next_attempt_at <= coalesce($1, statement_timestamp())
), due AS MATERIALIZED (
    -- Rows claimed by whoever held a destination before this claim are `processing` by
    -- now: the lock re-reads them and the state test leaves them out.
    SELECT w.id, w.state FROM webhook_deliveries w
    WHERE w.id = ANY (ARRAY(SELECT c.id FROM candidates c
                            ORDER BY c.turn, c.next_attempt_at
                            LIMIT greatest($3 - (SELECT count(*) FROM expired), 0)))
      AND w.state = 'pending'
    FOR UPDATE SKIP LOCKED
)
