-- (after replay_filter.sql) Replays every failed delivery that matches (see
-- replay_one.sql; never one of a deleted endpoint, nor one without a destination), in one
-- durable statement; answers how many. `matching` is read twice, so PostgreSQL reads it
-- once. $6 retarget: to each destination's URL and secret (or recipients) as they are now
-- (see replay_one.sql; a destination removed then keeps its deliveries failed); $8 now
-- (NULL: the database's clock).
, live_destination AS MATERIALIZED (
    -- The destinations and endpoints (not deleted) of what matches, held (key share)
    -- until this commits (see replay_one.sql).
    SELECT ds.id,
           destination_snapshot_url(ds.kind, ds.url, ds.recipients, ds.reply_to_field) AS url,
           ds.secret
    FROM destinations ds
    JOIN endpoints e ON e.id = ds.endpoint_id
    WHERE ds.id IN (SELECT m.destination_id FROM matching m)
      AND e.deleted_at IS NULL
      AND (NOT $6::boolean OR ds.removed_at IS NULL)
    FOR KEY SHARE OF ds, e
), replayed AS (
    UPDATE webhook_deliveries d
    SET state = 'pending', next_attempt_at = coalesce($8, statement_timestamp()),
        cycle_attempts = 0, claim_token = NULL, claim_expires_at = NULL, completed_at = NULL,
        destination_id = ld.id,
        destination_url = CASE WHEN $6 THEN ld.url ELSE d.destination_url END,
        signing_secret = CASE WHEN $6 THEN ld.secret ELSE d.signing_secret END
    FROM matching m
    JOIN live_destination ld ON ld.id = m.destination_id
    WHERE d.id = m.id AND d.state = 'failed'
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
