-- The transactional outbox of public intake: the submission and, when the endpoint has a
-- webhook, its delivery (URL and secret copied from the endpoint as it is now, due at
-- once), in one statement and so one transaction: both rows or neither. The notification
-- on hymical_delivery_due wakes the workers at commit.
--
-- The unique constraint on (endpoint_id, idempotency_key) decides races between
-- concurrent first requests with one key: the loser inserts nothing.
--
-- $1 submission id, $2 endpoint id, $3 received at, $4 fields (json), $5 idempotency key,
-- $6 payload fingerprint, $7 delivery id, $8 the time "due" is judged by (NULL: the
-- database's clock, which every worker shares)
WITH new_submission AS (
    INSERT INTO submissions
        (id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint)
    VALUES ($1, $2, $3, $4, $5, $6)
    ON CONFLICT (endpoint_id, idempotency_key) DO NOTHING
    RETURNING id, endpoint_id, received_at
), new_delivery AS (
    INSERT INTO webhook_deliveries
        (id, submission_id, endpoint_id, destination_url, signing_secret, state,
         attempts, cycle_attempts, next_attempt_at, created_at)
    SELECT $7, s.id, s.endpoint_id, e.webhook_url, e.webhook_secret, 'pending',
           0, 0, coalesce($8, statement_timestamp()), s.received_at
    FROM new_submission s
    JOIN endpoints e ON e.id = s.endpoint_id
    WHERE e.webhook_url IS NOT NULL
    RETURNING id, endpoint_id, state, attempts, cycle_attempts
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'created'::varchar AS kind, state,
           NULL::varchar AS previous_state, attempts, cycle_attempts, NULL::varchar AS outcome
    FROM new_delivery
), result AS (
    SELECT (SELECT count(*) FROM new_submission) AS submissions,
           (SELECT count(*)
            FROM new_delivery, LATERAL pg_notify('hymical_delivery_due', '') AS notified)
               AS deliveries
)
