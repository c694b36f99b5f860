-- Puts one failed delivery back in the queue in one conditional update: pending, due now,
-- a fresh cycle (cycle_attempts = 0), no claim, no completion. `attempts` and the history
-- stay, so numbering continues. A delivery whose submission was erased, or whose endpoint
-- was deleted, stays failed.
-- By default it goes where it was first sent, signed with the secret it was accepted under
-- (its snapshot). Retargeted ($3), it takes the endpoint's webhook URL and secret as they
-- are now (a receiver moved, a leaked secret rotated); an endpoint without a webhook then
-- leaves it failed.
-- Wakes the workers at commit.
--
-- $1 delivery id, $2 now (NULL: the database's clock), $3 retarget
WITH live_endpoint AS MATERIALIZED (
    -- Its endpoint, unless deleted, held (key share) until this commits: a concurrent
    -- deleteEndpoint waits for the replay and then sees the delivery pending, or the
    -- replay waits for the delete and then finds the endpoint deleted.
    SELECT e.id, e.webhook_url, e.webhook_secret FROM endpoints e
    WHERE e.id = (SELECT d.endpoint_id FROM webhook_deliveries d WHERE d.id = $1)
      AND e.deleted_at IS NULL
      AND (NOT $3::boolean OR e.webhook_url IS NOT NULL)
    FOR KEY SHARE
), replayed AS (
    UPDATE webhook_deliveries d
    SET state = 'pending', next_attempt_at = coalesce($2, statement_timestamp()),
        cycle_attempts = 0, claim_token = NULL, claim_expires_at = NULL, completed_at = NULL,
        destination_url = CASE WHEN $3 THEN le.webhook_url ELSE d.destination_url END,
        signing_secret = CASE WHEN $3 THEN le.webhook_secret ELSE d.signing_secret END
    FROM live_endpoint le
    WHERE d.id = $1 AND d.state = 'failed' AND d.submission_id IS NOT NULL
      AND d.endpoint_id = le.id
    RETURNING d.id, d.submission_id, d.endpoint_id, d.destination_url, d.state, d.attempts,
              d.cycle_attempts, d.next_attempt_at, d.claim_expires_at, d.created_at,
              d.completed_at
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
