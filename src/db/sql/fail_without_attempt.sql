-- Ends a claim without an attempt (its submission was erased before it could be sent):
-- the delivery fails, guarded by the token like every owner transition.
--
-- $1 delivery id, $2 claim token, $3 now (NULL: the database's clock)
WITH failed AS (
    UPDATE webhook_deliveries
    SET state = 'failed', claim_token = NULL, claim_expires_at = NULL,
        completed_at = coalesce($3, statement_timestamp())
    WHERE id = $1 AND claim_token = $2
    RETURNING id, endpoint_id, state, attempts, cycle_attempts
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'failed_without_attempt'::varchar AS kind, state,
           'processing'::varchar AS previous_state, attempts, cycle_attempts,
           NULL::varchar AS outcome
    FROM failed
), result AS (
    SELECT count(*) AS changed FROM failed
)
