-- Records one attempt and, for the claim's owner, the delivery's next state, in one
-- statement and so one transaction.
--
-- `locked` takes the row lock, so a concurrent recorder waits and then reads the row as
-- this one left it; the attempt number is the next free one read from the locked row,
-- never from memory. The owner (the row still carries its token) raises both counters,
-- clears the claim and moves the state; a late worker (token gone or different) inserts
-- its attempt marked `late` and raises `attempts`, nothing else.
--
-- $1 claim token, $2 delivery id, $3 attempt id, $4 destination URL, $5 attempted at,
-- $6 outcome, $7 response status, $8 error text, $9 duration (ms), $10 the owner's next
-- state, $11 the wait before a retry (interval; NULL unless retrying), $12 now (NULL: the
-- database's clock)
WITH locked AS MATERIALIZED (
    SELECT id, submission_id, attempts, state, (claim_token IS NOT DISTINCT FROM $1) AS owner
    FROM webhook_deliveries
    WHERE id = $2
    FOR UPDATE
), attempt AS (
    INSERT INTO delivery_attempts
        (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at,
         outcome, response_status, error, duration_ms, late)
    SELECT $3, id, submission_id, attempts + 1, $4, $5, $6, $7, $8, $9, NOT owner
    FROM locked
    RETURNING attempt_number, outcome
), updated AS (
    UPDATE webhook_deliveries d
    SET attempts = l.attempts + 1,
        cycle_attempts = CASE WHEN l.owner THEN d.cycle_attempts + 1 ELSE d.cycle_attempts END,
        state = CASE WHEN l.owner THEN $10 ELSE d.state END,
        next_attempt_at = CASE
            WHEN l.owner AND $11::interval IS NOT NULL
                THEN coalesce($12, statement_timestamp()) + $11::interval
            ELSE d.next_attempt_at END,
        completed_at = CASE
            WHEN NOT l.owner THEN d.completed_at
            WHEN $10 IN ('delivered', 'failed') THEN coalesce($12, statement_timestamp())
            ELSE NULL END,
        claim_token = CASE WHEN l.owner THEN NULL ELSE d.claim_token END,
        claim_expires_at = CASE WHEN l.owner THEN NULL ELSE d.claim_expires_at END
    FROM locked l
    WHERE d.id = l.id
    RETURNING d.id, d.endpoint_id, d.state, d.attempts, d.cycle_attempts
), changes AS (
    SELECT u.id AS delivery_id, u.endpoint_id,
           (CASE WHEN l.owner THEN 'attempt_recorded' ELSE 'late_attempt_recorded' END)::varchar
               AS kind,
           u.state, l.state AS previous_state, u.attempts, u.cycle_attempts,
           (SELECT a.outcome FROM attempt a) AS outcome
    FROM updated u
    JOIN locked l ON l.id = u.id
), result AS (
    SELECT (SELECT a.attempt_number FROM attempt a) AS attempt_number,
           (SELECT l.owner FROM locked l) AS owner,
           (SELECT u.state FROM updated u) AS state
)
