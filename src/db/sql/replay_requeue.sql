-- (after replay_one.sql or replay_filter.sql, which define `matching`: the failed
-- deliveries to replay, each with its destination) Puts them back in the queue in one
-- durable statement: pending, due now, a fresh cycle (cycle_attempts = 0), no claim, no
-- completion. `attempts` and the history stay, so numbering continues. One whose
-- endpoint was deleted, or that names no destination, stays failed. Answers how many,
-- and wakes the workers at commit. `matching` is read twice, so PostgreSQL reads it once.
--
-- By default a delivery goes where it was first sent, signed with the secret it was
-- accepted under (its snapshot). Retargeted ($1), it takes its destination's URL and
-- secret (or, for an email destination, its recipients) as they are now (a receiver
-- moved, a leaked secret rotated); a destination removed has nothing current, and the
-- delivery stays failed.
--
-- $1 retarget, $2 now (NULL: the database's clock)
, live_destination AS MATERIALIZED (
    -- The destinations and endpoints (not deleted) of what matches, held (key share)
    -- until this commits: a concurrent deleteEndpoint (or removeDestination) waits for
    -- the replay and then sees the delivery pending, or the replay waits for it and then
    -- finds the endpoint deleted (or the destination removed).
    SELECT ds.id,
           destination_snapshot_url(ds.kind, ds.url, ds.recipients, ds.reply_to_field) AS url,
           ds.secret
    FROM destinations ds
    JOIN endpoints e ON e.id = ds.endpoint_id
    WHERE ds.id IN (SELECT m.destination_id FROM matching m)
      AND e.deleted_at IS NULL
      AND (NOT $1::boolean OR ds.removed_at IS NULL)
    FOR KEY SHARE OF ds, e
), changes AS (
    UPDATE webhook_deliveries d
    SET state = 'pending', next_attempt_at = coalesce($2, statement_timestamp()),
        cycle_attempts = 0, claim_token = NULL, claim_expires_at = NULL, completed_at = NULL,
        destination_url = CASE WHEN $1 THEN ld.url ELSE d.destination_url END,
        signing_secret = CASE WHEN $1 THEN ld.secret ELSE d.signing_secret END
    FROM matching m
    JOIN live_destination ld ON ld.id = m.destination_id
    WHERE d.id = m.id AND d.state = 'failed'
    RETURNING d.id AS delivery_id, d.endpoint_id, 'replayed'::varchar AS kind, d.state,
              'failed'::varchar AS previous_state, d.attempts, d.cycle_attempts,
              NULL::varchar AS outcome
), result AS (
    SELECT (SELECT count(*) FROM changes) AS replayed,
           (SELECT count(*)
            FROM (SELECT 1 FROM changes LIMIT 1) AS any_replayed,
                 LATERAL pg_notify('hymical_delivery_due', '') AS notified) AS notified
)
