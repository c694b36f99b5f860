-- Hands request slots on (migration hand_on_slots): in the transaction that recorded
-- attempts, claims the next due deliveries of the destinations those attempts finished,
-- at most one per slot handed on, as a claim would (claim_take.sql: head of each
-- destination's queue first, locked, a fresh token and lease). Leases that ran out are
-- left to the claim loop.
--
-- $1 now (NULL: the database's clock), $2 lease, $3 how many in all, $4 requests in flight
-- allowed per destination (unless the destination sets its own), $5 the destinations,
-- $6 the slots handed on to each.
WITH expired AS MATERIALIZED (
    SELECT NULL::varchar AS id, NULL::varchar AS state WHERE false
), serving AS MATERIALIZED (
    SELECT s.destination_id, s.free_slots
    FROM handable_destinations($5, $6, $4) AS s
)
