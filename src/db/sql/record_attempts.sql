-- Records a batch of attempts (requests that finished close together) and, for each
-- claim's owner, its delivery's next state, in one statement and so one transaction. Each
-- row is fenced on its own: the batch is only a way to pay for one round trip and one
-- commit instead of one per attempt. A batch holds at most one attempt per delivery.
--
-- `locked` takes the row locks, in id order (so two batches never wait on each other in a
-- cycle), and a concurrent recorder of the same delivery waits and then reads the row as
-- this one left it; the attempt number is the next free one read from the locked row,
-- never from memory. The owner (the row still carries its token) raises both counters,
-- clears the claim and moves the state; a late worker (token gone or different) inserts
-- its attempt marked `late` and raises `attempts`, nothing else.
--
-- One element per attempt: $1 claim tokens, $2 delivery ids, $3 attempt ids, $4
-- destination URLs, $5 attempted at, $6 outcomes, $7 response statuses, $8 error texts,
-- $9 durations (ms), $10 the owner's next states, $11 the waits before a retry (NULL
-- unless retrying); $12 now (NULL: the database's clock); $13 SMTP reply texts (NULL but
-- for an email the server replied to). Answers one row per attempt
-- recorded: its delivery, number, whether it was the owner's, and the delivery's state.
WITH input AS (
    SELECT *
    FROM unnest($1::varchar[], $2::varchar[], $3::varchar[], $4::varchar[],
                $5::timestamptz[], $6::varchar[], $7::integer[], $8::varchar[],
                $9::integer[], $10::varchar[], $11::interval[], $13::varchar[])
         WITH ORDINALITY AS i (claim_token, delivery_id, attempt_id, destination_url,
                               attempted_at, outcome, response_status, error, duration_ms,
                               next_state, retry_after, reply, position)
), locked AS MATERIALIZED (
    SELECT d.id, d.submission_id, d.attempts, d.state,
           (d.claim_token IS NOT DISTINCT FROM i.claim_token) AS owner,
           i.attempt_id, i.destination_url, i.attempted_at, i.outcome, i.response_status,
           i.error, i.duration_ms, i.next_state, i.retry_after, i.reply
    FROM webhook_deliveries d
    JOIN input i ON i.delivery_id = d.id
    ORDER BY d.id
    FOR UPDATE OF d
), attempt AS (
    INSERT INTO delivery_attempts
        (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at,
         outcome, response_status, error, duration_ms, late, reply)
    SELECT attempt_id, id, submission_id, attempts + 1, destination_url, attempted_at,
           outcome, response_status, error, duration_ms, NOT owner, reply
    FROM locked
    RETURNING delivery_id, attempt_number
), updated AS (
    UPDATE webhook_deliveries d
    SET attempts = l.attempts + 1,
        cycle_attempts = CASE WHEN l.owner THEN d.cycle_attempts + 1 ELSE d.cycle_attempts END,
        state = CASE WHEN l.owner THEN l.next_state ELSE d.state END,
        next_attempt_at = CASE
            WHEN l.owner AND l.retry_after IS NOT NULL
                THEN coalesce($12, statement_timestamp()) + l.retry_after
            ELSE d.next_attempt_at END,
        completed_at = CASE
            WHEN NOT l.owner THEN d.completed_at
            WHEN l.next_state IN ('delivered', 'failed') THEN coalesce($12, statement_timestamp())
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
           u.state, l.state AS previous_state, u.attempts, u.cycle_attempts, l.outcome
    FROM updated u
    JOIN locked l ON l.id = u.id
), result AS (
    SELECT l.id AS delivery_id, a.attempt_number, l.owner, u.state
    FROM locked l
    JOIN attempt a ON a.delivery_id = l.id
    JOIN updated u ON u.id = l.id
)
