-- Replays every failed delivery the filter matches (see replay_one.sql; never one of a
-- deleted endpoint, nor one without a destination), in one durable statement; answers
-- how many.
--
-- $1 endpoint id (NULL: every endpoint), $2 failed after, $3 failed before, $5 created
-- after, $6 created before (exclusive, NULL: unbounded), $4 now (NULL: the database's
-- clock), $7 retarget: to each destination's URL and secret (or recipients) as they are
-- now (see replay_one.sql; a destination removed then keeps its deliveries failed), $8
-- destination id (NULL: every destination). replayable_count.sql counts what the same
-- filter would take.
WITH matching AS MATERIALIZED (
    SELECT d.id, t.destination_id
    FROM webhook_deliveries d
    CROSS JOIN LATERAL (
        -- Its destination; history recorded before destinations names none and is its
        -- endpoint's upgraded webhook's (see replay_one.sql).
        SELECT coalesce(d.destination_id,
                        (SELECT ds.id FROM destinations ds
                         WHERE ds.endpoint_id = d.endpoint_id AND ds.position = 1
                           AND ds.kind = 'webhook' AND ds.created_at <= d.created_at))
                   AS destination_id
    ) t
    WHERE d.state = 'failed' AND d.submission_id IS NOT NULL
      AND ($1::varchar IS NULL OR d.endpoint_id = $1)
      AND ($2::timestamptz IS NULL OR d.completed_at > $2)
      AND ($3::timestamptz IS NULL OR d.completed_at < $3)
      AND ($5::timestamptz IS NULL OR d.created_at > $5)
      AND ($6::timestamptz IS NULL OR d.created_at < $6)
      AND ($8::varchar IS NULL OR d.destination_id = $8
           OR (d.destination_id IS NULL AND t.destination_id = $8))
), live_destination AS MATERIALIZED (
    -- The destinations and endpoints (not deleted) of what matches, held (key share)
    -- until this commits (see replay_one.sql).
    SELECT ds.id,
           destination_snapshot_url(ds.kind, ds.url, ds.recipients, ds.reply_to_field) AS url,
           ds.secret
    FROM destinations ds
    JOIN endpoints e ON e.id = ds.endpoint_id
    WHERE ds.id IN (SELECT m.destination_id FROM matching m)
      AND e.deleted_at IS NULL
      AND (NOT $7::boolean OR ds.removed_at IS NULL)
    FOR KEY SHARE OF ds, e
), replayed AS (
    UPDATE webhook_deliveries d
    SET state = 'pending', next_attempt_at = coalesce($4, statement_timestamp()),
        cycle_attempts = 0, claim_token = NULL, claim_expires_at = NULL, completed_at = NULL,
        destination_id = ld.id,
        destination_url = CASE WHEN $7 THEN ld.url ELSE d.destination_url END,
        signing_secret = CASE WHEN $7 THEN ld.secret ELSE d.signing_secret END
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
