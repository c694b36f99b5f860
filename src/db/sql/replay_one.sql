-- Puts one failed delivery back in the queue in one conditional update: pending, due now,
-- a fresh cycle (cycle_attempts = 0), no claim, no completion. `attempts` and the history
-- stay, so numbering continues. A delivery whose submission was erased, or whose endpoint
-- was deleted, stays failed.
-- Wakes the workers at commit.
--
-- $1 delivery id, $2 now (NULL: the database's clock)
WITH live_endpoint AS MATERIALIZED (
    -- Its endpoint, unless deleted, held (key share) until this commits: a concurrent
    -- deleteEndpoint waits for the replay and then sees the delivery pending, or the
    -- replay waits for the delete and then finds the endpoint deleted.
    SELECT e.id FROM endpoints e
    WHERE e.id = (SELECT d.endpoint_id FROM webhook_deliveries d WHERE d.id = $1)
      AND e.deleted_at IS NULL
    FOR KEY SHARE
), replayed AS (
    UPDATE webhook_deliveries
    SET state = 'pending', next_attempt_at = coalesce($2, statement_timestamp()),
        cycle_attempts = 0, claim_token = NULL, claim_expires_at = NULL, completed_at = NULL
    WHERE id = $1 AND state = 'failed' AND submission_id IS NOT NULL
      AND endpoint_id IN (SELECT id FROM live_endpoint)
    RETURNING id, submission_id, endpoint_id, destination_url, state, attempts,
              cycle_attempts, next_attempt_at, claim_expires_at, created_at, completed_at
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'replayed'::varchar AS kind, state,
           'failed'::varchar AS previous_state, attempts, cycle_attempts,
           NULL::varchar AS outcome
    FROM replayed
), result AS (
    SELECT r.id, r.submission_id, r.endpoint_id, r.destination_url, r.state, r.attempts,
           r.cycle_attempts, r.next_attempt_at, r.claim_expires_at, r.created_at,
           r.completed_at
    FROM replayed r, LATERAL pg_notify('hymical_delivery_due', '') AS notified
)
