-- Cancels what an endpoint being deleted (db/endpoints.rs `delete`), or one of its
-- destinations being removed (db/destinations.rs `remove`), still owes: the pending and
-- processing deliveries end `failed` now, their claims cleared, so a worker still sending
-- records its attempt as a late one. Locks in id order, as the recorder does. $1 the
-- endpoint, $2 now, $3 the destination (NULL: every destination of the endpoint). Answers
-- how many were cancelled.
WITH locked AS MATERIALIZED (
    SELECT d.id, d.state FROM webhook_deliveries d
    WHERE d.endpoint_id = $1 AND d.state IN ('pending', 'processing')
      AND ($3::varchar IS NULL OR d.destination_id = $3)
    ORDER BY d.id
    FOR UPDATE
), cancelled AS (
    UPDATE webhook_deliveries d
    SET state = 'failed', completed_at = $2, claim_token = NULL, claim_expires_at = NULL
    FROM locked l
    WHERE d.id = l.id
    RETURNING d.id, d.endpoint_id, d.state, d.attempts, d.cycle_attempts, l.state AS previous_state
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'cancelled'::varchar AS kind, state,
           previous_state, attempts, cycle_attempts, NULL::varchar AS outcome
    FROM cancelled
), result AS (
    SELECT count(*) AS cancelled FROM cancelled
)
