-- Gives back claims whose requests never started (a stopping worker, an intake batch
-- whose answer was lost), each only if the claim is still the holder's: pending again,
-- still due, counters untouched, and the workers woken to claim them again.
--
-- $1 delivery ids, $2 their claim tokens (one element each)
WITH changes AS (
    UPDATE webhook_deliveries w
    SET state = 'pending', claim_token = NULL, claim_expires_at = NULL
    FROM unnest($1::varchar[], $2::varchar[]) AS given(id, claim_token)
    WHERE w.id = given.id AND w.claim_token = given.claim_token
    RETURNING w.id AS delivery_id, w.endpoint_id, 'handed_back'::varchar AS kind, w.state,
              'processing'::varchar AS previous_state, w.attempts, w.cycle_attempts,
              NULL::varchar AS outcome
), notified AS (
    SELECT pg_notify('hymical_delivery_due', '')
    FROM (SELECT 1 FROM changes LIMIT 1) AS any_delivery
), result AS (
    SELECT count(*) AS changed, (SELECT count(*) FROM notified) AS notified
    FROM changes
)
