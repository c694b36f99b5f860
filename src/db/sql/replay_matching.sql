-- Replays every failed delivery the filter matches (see replay_one.sql; never one of a
-- deleted endpoint), in one durable
-- statement; answers how many.
--
-- $1 endpoint id (NULL: every endpoint), $2 failed after, $3 failed before, $5 created
-- after, $6 created before (exclusive, NULL: unbounded), $4 now (NULL: the database's
-- clock), $7 retarget: to each endpoint's webhook URL and secret as they are now (see
-- replay_one.sql; an endpoint without a webhook then keeps its deliveries failed).
-- replayable_count.sql counts what the same filter would take.
WITH live_endpoint AS MATERIALIZED (
    -- The endpoints not deleted, held (key share) until this commits (see replay_one.sql).
    SELECT e.id, e.webhook_url, e.webhook_secret FROM endpoints e
    WHERE e.deleted_at IS NULL AND ($1::varchar IS NULL OR e.id = $1)
      AND (NOT $7::boolean OR e.webhook_url IS NOT NULL)
    FOR KEY SHARE
), replayed AS (
    UPDATE webhook_deliveries d
    SET state = 'pending', next_attempt_at = coalesce($4, statement_timestamp()),
        cycle_attempts = 0, claim_token = NULL, claim_expires_at = NULL, completed_at = NULL,
        destination_url = CASE WHEN $7 THEN le.webhook_url ELSE d.destination_url END,
        signing_secret = CASE WHEN $7 THEN le.webhook_secret ELSE d.signing_secret END
    FROM live_endpoint le
    WHERE d.state = 'failed' AND d.submission_id IS NOT NULL
      AND ($1::varchar IS NULL OR d.endpoint_id = $1)
      AND ($2::timestamptz IS NULL OR d.completed_at > $2)
      AND ($3::timestamptz IS NULL OR d.completed_at < $3)
      AND ($5::timestamptz IS NULL OR d.created_at > $5)
      AND ($6::timestamptz IS NULL OR d.created_at < $6)
      AND d.endpoint_id = le.id
    RETURNING d.id, d.endpoint_id, d.state, d.attempts, d.cycle_attempts
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'replayed'::varchar AS kind, state,
           'failed'::varchar AS previous_state, attempts, cycle_attempts,
           NULL::varchar AS outcome
    FROM replayed
), result AS (
    SELECT (SELECT count(*) FROM replayed) AS replayed,
           (SELECT count(*)
            FROM (SELECT 1 FROM replayed LIMIT 1) AS any_replayed,
                 LATERAL pg_notify('hymical_delivery_due', '') AS notified) AS notified
)
