-- Puts one failed delivery back in the queue in one conditional update: pending, due now,
-- a fresh cycle (cycle_attempts = 0), no claim, no completion. `attempts` and the history
-- stay, so numbering continues. A delivery whose submission was erased, or whose endpoint
-- was deleted, stays failed.
-- By default it goes where it was first sent, signed with the secret it was accepted under
-- (its snapshot). Retargeted ($3), it takes its destination's URL and secret (or, for an
-- email destination, its recipients) as they are now (a receiver moved, a leaked secret
-- rotated); a destination removed has nothing current, and the delivery stays failed.
-- History written before destinations has none: it belongs to the destination the
-- upgrade made from its endpoint's webhook (position 1, a webhook, created no later than
-- the delivery: see migration destinations), and is given it here; without one it stays
-- failed.
-- Wakes the workers at commit.
--
-- $1 delivery id, $2 now (NULL: the database's clock), $3 retarget
WITH target AS MATERIALIZED (
    SELECT d.id,
           coalesce(d.destination_id,
                    (SELECT ds.id FROM destinations ds
                     WHERE ds.endpoint_id = d.endpoint_id AND ds.position = 1
                       AND ds.kind = 'webhook' AND ds.created_at <= d.created_at))
               AS destination_id
    FROM webhook_deliveries d
    WHERE d.id = $1
), live_destination AS MATERIALIZED (
    -- Its destination and endpoint, unless the endpoint was deleted, held (key share)
    -- until this commits: a concurrent deleteEndpoint (or removeDestination) waits for the
    -- replay and then sees the delivery pending, or the replay waits for it and then finds
    -- the endpoint deleted (or the destination removed).
    SELECT ds.id, ds.removed_at,
           destination_snapshot_url(ds.kind, ds.url, ds.recipients, ds.reply_to_field) AS url,
           ds.secret
    FROM destinations ds
    JOIN endpoints e ON e.id = ds.endpoint_id
    WHERE ds.id = (SELECT t.destination_id FROM target t)
      AND e.deleted_at IS NULL
      AND (NOT $3::boolean OR ds.removed_at IS NULL)
    FOR KEY SHARE OF ds, e
), replayed AS (
    UPDATE webhook_deliveries d
    SET state = 'pending', next_attempt_at = coalesce($2, statement_timestamp()),
        cycle_attempts = 0, claim_token = NULL, claim_expires_at = NULL, completed_at = NULL,
        destination_id = ld.id,
        destination_url = CASE WHEN $3 THEN ld.url ELSE d.destination_url END,
        signing_secret = CASE WHEN $3 THEN ld.secret ELSE d.signing_secret END
    FROM live_destination ld
    WHERE d.id = $1 AND d.state = 'failed' AND d.submission_id IS NOT NULL
    RETURNING d.id, d.submission_id, d.endpoint_id, d.destination_id, d.destination_url,
              d.state, d.attempts, d.cycle_attempts, d.next_attempt_at, d.claim_expires_at,
              d.created_at, d.completed_at
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'replayed'::varchar AS kind, state,
           'failed'::varchar AS previous_state, attempts, cycle_attempts,
           NULL::varchar AS outcome
    FROM replayed
), result AS (
    SELECT r.id, r.submission_id, r.endpoint_id, r.destination_id, r.destination_url,
           r.state, r.attempts, r.cycle_attempts, r.next_attempt_at, r.claim_expires_at,
           r.created_at, r.completed_at
    FROM replayed r, LATERAL pg_notify('hymical_delivery_due', '') AS notified
)
