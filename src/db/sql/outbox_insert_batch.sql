-- The transactional outbox of public intake, for a batch of submissions at once (group
-- commit: one statement, one transaction, one WAL flush for all of them). Each
-- submission and, when its endpoint has a webhook, its delivery (URL and secret copied
-- from the endpoint as it is now, due at once) are written by this one statement: both
-- rows or neither, for every submission of the batch. The notification on
-- hymical_delivery_due wakes the workers at commit.
--
-- The unique constraint on (endpoint_id, idempotency_key) decides races between
-- concurrent first requests with one key, in this batch or another: the loser inserts
-- nothing and is missing from the answer.
--
-- $1 submission ids, $2 endpoint ids, $3 received at, $4 fields (json), $5 idempotency
-- keys, $6 payload fingerprints (NULL without a key), $7 delivery ids: one element per
-- submission; $8 the time "due" is judged by (NULL: the database's clock, which every
-- worker shares). Answers one row per submission written: its id and whether a delivery
-- was queued with it.
WITH input AS (
    SELECT *
    FROM unnest($1::varchar[], $2::varchar[], $3::timestamptz[], $4::json[], $5::varchar[],
                $6::varchar[], $7::varchar[])
         WITH ORDINALITY AS i (id, endpoint_id, received_at, fields, idempotency_key,
                               payload_fingerprint, delivery_id, position)
), new_submission AS (
    INSERT INTO submissions
        (id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint)
    SELECT id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint
    FROM input
    ORDER BY position
    ON CONFLICT (endpoint_id, idempotency_key) DO NOTHING
    RETURNING id, endpoint_id, received_at
), live_endpoint AS MATERIALIZED (
    -- The batch's endpoints as they are once every change of them that has the row locked
    -- has committed: a key-share lock (the one the foreign key check takes anyway) waits
    -- for a concurrent deleteEndpoint, and then the row is read again, so a delivery is
    -- never queued for an endpoint deleted meanwhile (its submission is kept, as any of
    -- an endpoint without a webhook) and a delete sees every delivery queued before it.
    SELECT e.id, e.webhook_url, e.webhook_secret
    FROM endpoints e
    WHERE e.id IN (SELECT endpoint_id FROM input) AND e.deleted_at IS NULL
    FOR KEY SHARE
), new_delivery AS (
    INSERT INTO webhook_deliveries
        (id, submission_id, endpoint_id, destination_url, signing_secret, state,
         attempts, cycle_attempts, next_attempt_at, created_at)
    SELECT i.delivery_id, s.id, s.endpoint_id, e.webhook_url, e.webhook_secret, 'pending',
           0, 0, coalesce($8, statement_timestamp()), s.received_at
    FROM new_submission s
    JOIN input i ON i.id = s.id
    JOIN live_endpoint e ON e.id = s.endpoint_id
    WHERE e.webhook_url IS NOT NULL
    RETURNING id, submission_id, endpoint_id, state, attempts, cycle_attempts
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'created'::varchar AS kind, state,
           NULL::varchar AS previous_state, attempts, cycle_attempts, NULL::varchar AS outcome
    FROM new_delivery
), notified AS (
    SELECT pg_notify('hymical_delivery_due', '')
    FROM (SELECT 1 FROM new_delivery LIMIT 1) AS any_delivery
), result AS (
    SELECT s.id, d.id IS NOT NULL AS delivery_queued,
           (SELECT count(*) FROM notified) AS notified
    FROM new_submission s
    LEFT JOIN new_delivery d ON d.submission_id = s.id
)
