-- Gives back a claim whose request never started (a stopping worker), if the claim is
-- still this worker's: pending again, still due, counters untouched.
--
-- $1 delivery id, $2 claim token
WITH handed_back AS (
    UPDATE webhook_deliveries
    SET state = 'pending', claim_token = NULL, claim_expires_at = NULL
    WHERE id = $1 AND claim_token = $2
    RETURNING id, endpoint_id, state, attempts, cycle_attempts
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'handed_back'::varchar AS kind, state,
           'processing'::varchar AS previous_state, attempts, cycle_attempts,
           NULL::varchar AS outcome
    FROM handed_back
), result AS (
    SELECT count(*) AS changed FROM handed_back
)
