-- Marks a submission of the spam folder not spam and queues its deliveries, in one
-- statement: as if it had just arrived, one delivery per destination of its endpoint
-- that receives `submission.received` as the destinations are now, by the rule the
-- outbox queues by (submission_destinations, migration submission_destinations: a
-- key-share lock against a concurrent removal, an autoresponder's confirmation at most
-- once per mailbox per window), each due at once. Only a submission
-- still in the spam folder is changed, so a second call (or one racing it: the row lock
-- orders them) queues nothing; and a submission has at most one delivery per destination
-- (the unique index), which `ON CONFLICT` keeps should it have had some already (marked
-- spam after it was delivered). The verdict and the deliveries commit together: a crash
-- leaves either both or neither.
--
-- $1 submission id, $2 now (NULL: the database's clock). Answers whether it was in the
-- spam folder and how many deliveries were queued.
WITH released AS (
    UPDATE submissions s
    SET spam = false, spam_reviewed_at = coalesce($2, statement_timestamp())
    WHERE s.id = $1 AND s.spam
    RETURNING s.id, s.endpoint_id, s.received_at, s.fields
), new_delivery AS (
    INSERT INTO webhook_deliveries
        (id, submission_id, endpoint_id, destination_id, destination_url, signing_secret,
         state, attempts, cycle_attempts, next_attempt_at, created_at)
    SELECT 'whd_' || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
               || substr(md5(random()::text || s.id || d.destination_id), 1, 20),
           s.id, s.endpoint_id, d.destination_id, d.url, d.secret,
           'pending', 0, 0, coalesce($2, statement_timestamp()),
           coalesce($2, statement_timestamp())
    FROM released s
    CROSS JOIN LATERAL submission_destinations(ARRAY[s.id], ARRAY[s.endpoint_id],
                                               ARRAY[s.fields],
                                               coalesce($2, statement_timestamp())) AS d
    ON CONFLICT (submission_id, destination_id) DO NOTHING
    RETURNING id, endpoint_id, state, attempts, cycle_attempts
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'created'::varchar AS kind,
           'pending'::varchar AS state, NULL::varchar AS previous_state, attempts,
           cycle_attempts, NULL::varchar AS outcome
    FROM new_delivery
), notified AS (
    SELECT pg_notify('hymical_delivery_due', '')
    WHERE EXISTS (SELECT 1 FROM new_delivery)
), result AS (
    SELECT (SELECT count(*) FROM released) AS released,
           (SELECT count(*) FROM new_delivery) AS queued,
           (SELECT count(*) FROM notified) AS notified
)
