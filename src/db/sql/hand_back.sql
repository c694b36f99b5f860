-- Gives back claims whose requests never started (a stopping worker, an intake batch
-- whose answer was lost), each only if the claim is still the holder's: pending again,
-- still due, counters untouched, and the workers woken to claim them again.
--
-- $1 delivery ids, $2 their claim tokens (one element each)
WITH handed_back AS (
    UPDATE webhook_deliveries w
    SET state = 'pending', claim_token = NULL, claim_expires_at = NULL
    FROM unnest($1::varchar[], $2::varchar[]) AS given(id, claim_token)
    WHERE w.id = given.id AND w.claim_token = given.claim_token
    RETURNING w.id, w.endpoint_id, w.state, w.attempts, w.cycle_attempts
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'handed_back'::varchar AS kind, state,
           'processing'::varchar AS previous_state, attempts, cycle_attempts,
           NULL::varchar AS outcome
    FROM handed_back
), notified AS (
    SELECT pg_notify('hymical_delivery_due', '')
    FROM (SELECT 1 FROM handed_back LIMIT 1) AS any_delivery
), result AS (
    SELECT count(*) AS changed, (SELECT count(*) FROM notified) AS notified
    FROM handed_back
)
