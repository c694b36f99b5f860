-- The transactional outbox of public intake, for a batch of submissions at once (group
-- commit: one statement, one transaction, one WAL flush for all of them). Each
-- submission and one delivery per destination of its endpoint that receives
-- `submission.received` (a webhook: its URL and
-- secret as they are now; an email: a `mailto:` of its recipients; each due at once) are
-- written by this one statement: all the rows or none, for every submission of the
-- batch. The notification on hymical_delivery_due wakes the workers at commit.
--
-- A submission's first delivery (its first destination's) takes the id of $7 and may be
-- written already claimed for the accepting process's worker (claiming at intake:
-- `processing`, the token of $12 at its position, a lease of $10), on a destination whose
-- claim lock this statement got and that has room under its cap ($11 unless it sets its
-- own) and no delivery due before it, and only when it goes to the URL the destination
-- has after that lock (intake_claim_destination_room, migration destinations); up to $9
-- of them; the rest are pending as always. Its other deliveries get ids made here, ordered
-- by time as the Rust ids are. A claimed one gets its `created` and its `claimed` event,
-- in that order, as if a worker had claimed it right after. The workers are woken when a
-- delivery is left pending, and the other processes' workers whenever the statement held
-- a destination's claim lock: a claim that ran meanwhile skipped that destination (a
-- try-lock), and something of it may have become due since the lock was taken (a
-- replay, a retry).
--
-- The unique constraint on (endpoint_id, idempotency_key) decides races between
-- concurrent first requests with one key, in this batch or another: the loser inserts
-- nothing and is missing from the answer. Submissions without a key are inserted apart
-- from those with one (`unkeyed_submission`), since they cannot conflict.
--
-- $1 submission ids, $2 endpoint ids, $3 received at, $4 fields (json), $5 idempotency
-- keys, $6 payload fingerprints (NULL without a key), $7 first delivery ids: one element
-- per submission; $8 the time "due" is judged by (NULL: the database's clock, which every
-- worker shares); $9 how many to claim at most (0: none), $10 their lease, $11 the cap per
-- destination, $12 the claim token for each submission's first delivery should it be
-- claimed (empty when $9 is 0), $13 the accepting process's mark on the wake-up; $14 to
-- $18 the rate-limit counters to add the batch's requests to, one element per counter in
-- the order they are locked (limiter, subject, window start, requests to add, limit;
-- empty with rate limiting off); $19 per submission the reasons it was judged spam (a
-- JSON array of strings), NULL for one accepted; $20 each submission's uploaded files
-- (see attached_file). Answers one row per submission written: its id, whether
-- a delivery was queued with it, and for a claimed first delivery its token, destination
-- and kind, where it goes, the snapshot secret, the destination's live secrets after the
-- lock and its run of failed deliveries.
WITH input AS (
    -- Each submission as it is stored: the spam verdict a flag and its reasons.
    SELECT i.*, i.spam_verdict IS NOT NULL AS spam,
           ARRAY(SELECT json_array_elements_text(i.spam_verdict)) AS spam_reasons
    FROM unnest($1::varchar[], $2::varchar[], $3::timestamptz[], $4::json[], $5::varchar[],
                $6::varchar[], $7::varchar[], $19::json[], $21::varchar[])
         WITH ORDINALITY AS i (id, endpoint_id, received_at, fields, idempotency_key,
                               payload_fingerprint, delivery_id, spam_verdict, trace_parent,
                               position)
), keyed_submission AS (
    INSERT INTO submissions (id, endpoint_id, received_at, fields, idempotency_key,
                             payload_fingerprint, spam, spam_reasons, trace_parent)
    SELECT id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint, spam,
           spam_reasons, trace_parent
    FROM input WHERE idempotency_key IS NOT NULL ORDER BY position
    ON CONFLICT (endpoint_id, idempotency_key) DO NOTHING
    RETURNING id, endpoint_id, received_at, spam
), unkeyed_submission AS (
    -- A submission without a key can conflict with none (NULLs are distinct in the unique
    -- constraint), so it is inserted plainly: `ON CONFLICT` would cost each row a probe of
    -- that index before its insert, a speculative-insertion lock and a second WAL record.
    INSERT INTO submissions (id, endpoint_id, received_at, fields, idempotency_key,
                             payload_fingerprint, spam, spam_reasons, trace_parent)
    SELECT id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint, spam,
           spam_reasons, trace_parent
    FROM input WHERE idempotency_key IS NULL ORDER BY position
    RETURNING id, endpoint_id, received_at, spam
), new_submission AS (
    SELECT * FROM keyed_submission
    UNION ALL
    SELECT * FROM unkeyed_submission
), delivered_submission AS (
    -- A submission judged spam is kept in the spam folder and gets no delivery (nor an
    -- autoresponder's confirmation) until an operator marks it not spam
    -- (release_spam.sql queues them then).
    SELECT * FROM new_submission WHERE NOT spam
), delivering AS (
    SELECT array_agg(s.id ORDER BY i.position) AS ids,
           array_agg(s.endpoint_id ORDER BY i.position) AS endpoint_ids,
           array_agg(i.fields ORDER BY i.position) AS fields
    FROM delivered_submission s
    JOIN input i ON i.id = s.id
), planned_delivery AS MATERIALIZED (
    -- A delivery for each destination of each submission delivered
    -- (submission_destinations, migration submission_destinations: the destinations
    -- locked against a concurrent delete or removal, an autoresponder's confirmation at
    -- most once per mailbox per window).
    SELECT d.*
    FROM delivering g
    CROSS JOIN LATERAL submission_destinations(g.ids, g.endpoint_ids, g.fields,
                                               coalesce($8, statement_timestamp())) AS d
), queued AS (
    SELECT CASE WHEN d.first THEN i.delivery_id
                ELSE 'whd_' || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint),
                                    12, '0')
                            || substr(md5(random()::text || i.delivery_id || d.destination_id), 1, 20)
           END AS delivery_id,
           s.id AS submission_id, s.endpoint_id, s.received_at, i.position, d.first,
           d.destination_id, d.kind, d.url, d.secret,
           CASE WHEN d.first THEN ($12::varchar[])[i.position::integer] END AS claim_token,
           row_number() OVER (PARTITION BY d.destination_id, d.first ORDER BY i.position) AS turn
    FROM planned_delivery d
    JOIN delivered_submission s ON s.id = d.submission_id
    JOIN input i ON i.id = s.id
), room AS MATERIALIZED (
    -- Not called at all when nothing may be claimed (an API-only process, a busy worker).
    SELECT r.*
    FROM intake_claim_destination_room(
        ARRAY(SELECT q.destination_id FROM queued q
              WHERE q.first AND q.turn = 1 ORDER BY q.position),
        coalesce($8, statement_timestamp()), $9, $11) AS r
    WHERE $9 > 0
), fitting AS (
    SELECT q.*,
           coalesce(q.first AND q.turn <= r.free_slots AND r.url = q.url
                    AND q.claim_token IS NOT NULL, false) AS fits
    FROM queued q
    LEFT JOIN room r ON r.destination_id = q.destination_id
), planned AS (
    SELECT f.*,
           f.fits AND row_number() OVER (PARTITION BY f.fits ORDER BY f.position) <= $9
               AS claim
    FROM fitting f
), new_delivery AS (
    INSERT INTO webhook_deliveries
        (id, submission_id, endpoint_id, destination_id, destination_url, signing_secret,
         state, attempts, cycle_attempts, next_attempt_at, created_at, claim_token,
         claim_expires_at)
    SELECT p.delivery_id, p.submission_id, p.endpoint_id, p.destination_id, p.url, p.secret,
           CASE WHEN p.claim THEN 'processing' ELSE 'pending' END,
           0, 0, coalesce($8, statement_timestamp()), p.received_at,
           CASE WHEN p.claim THEN p.claim_token END,
           CASE WHEN p.claim THEN coalesce($8, statement_timestamp()) + $10 END
    FROM planned p
    RETURNING id, submission_id, endpoint_id, destination_id, state, attempts,
              cycle_attempts, claim_token, destination_url, signing_secret
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'created'::varchar AS kind,
           'pending'::varchar AS state, NULL::varchar AS previous_state, attempts,
           cycle_attempts, NULL::varchar AS outcome
    FROM new_delivery
    UNION ALL
    SELECT id, endpoint_id, 'claimed', state, 'pending', attempts, cycle_attempts, NULL
    FROM new_delivery
    WHERE state = 'processing'
), notified AS (
    -- Deliveries left for the workers to claim (every worker), or only a destination's
    -- claim lock held (marked $13: the accepting process's own worker gets what was
    -- claimed and ignores it).
    SELECT pg_notify('hymical_delivery_due', CASE WHEN w.pending THEN '' ELSE $13 END)
    FROM (SELECT EXISTS (SELECT 1 FROM new_delivery WHERE state = 'pending') AS pending) w
    WHERE w.pending OR EXISTS (SELECT 1 FROM room)
), counted AS (
    -- Read by nothing: PostgreSQL runs a data-modifying step that no other step reads
    -- once the rest of the statement is done, so the counter rows are locked for the end
    -- of the statement and its commit, not for its inserts (but for the foreign-key
    -- checks, which PostgreSQL runs at the statement's end). That is how PostgreSQL runs
    -- such steps, not a promise of its documentation: were it to change, the rows would be
    -- held longer, never locked in another order. In the caller's order (per source, then
    -- per endpoint, each sorted by the subject's bytes), as count_attempts.sql locks them
    -- (`COLLATE "C"`), so that no two statements wait on each other in a cycle.
    --
    -- Each counter's limit goes into the row proposed (attempt_limit, migration
    -- counter_limit), where `DO UPDATE` finds it as `excluded`: a counter that ends over
    -- its limit calls rate_limit_holds, which raises, and the whole statement rolls back;
    -- one within it calls nothing (`CASE` evaluates only the branch it takes). A new
    -- counter's count is the batch's alone, so it is checked as it is proposed.
    INSERT INTO rate_limit_counters AS counter
        (limiter, subject, window_start, attempts, attempt_limit)
    SELECT c.limiter, c.subject, c.window_start,
           CASE WHEN c.attempts <= c.attempt_limit THEN c.attempts
                WHEN rate_limit_holds(c.attempts, c.attempt_limit) THEN c.attempts END,
           c.attempt_limit
    FROM unnest($14::varchar[], $15::varchar[], $16::timestamptz[], $17::integer[],
                $18::integer[])
         WITH ORDINALITY AS c (limiter, subject, window_start, attempts, attempt_limit,
                               position)
    ORDER BY c.position
    ON CONFLICT (limiter, subject, window_start) DO UPDATE
        SET attempts = CASE
                WHEN counter.attempts + excluded.attempts <= excluded.attempt_limit
                    THEN counter.attempts + excluded.attempts
                WHEN rate_limit_holds(counter.attempts + excluded.attempts,
                                      excluded.attempt_limit)
                    THEN counter.attempts + excluded.attempts
            END,
            attempt_limit = excluded.attempt_limit
), attached_file AS (
    -- A submission's uploaded files, stored before this statement (submission_files,
    -- migration file_uploads) and named by $20 (one JSON array of file ids per
    -- submission, in the order of $1; `[]` for a submission without files), become its
    -- own in this transaction: written with it or not at all. Only a row no submission
    -- holds is taken. A submission that lost an idempotency-key race is not in
    -- new_submission, so its files stay unattached and intake removes them.
    UPDATE submission_files f
    SET submission_id = s.id, attached_at = coalesce($8, statement_timestamp())
    FROM new_submission s
    JOIN unnest($1::varchar[], $20::json[]) AS a (submission_id, file_ids)
        ON a.submission_id = s.id
    CROSS JOIN LATERAL json_array_elements_text(a.file_ids) AS named (id)
    WHERE f.id = named.id AND f.submission_id IS NULL
    RETURNING f.id
), spam_endpoint AS (
    -- The endpoints of the batch's spam that have a destination: spam is answered as it
    -- would have been accepted, queued when its endpoint has one (a bot learns nothing).
    SELECT DISTINCT ds.endpoint_id
    FROM destinations ds
    JOIN endpoints e ON e.id = ds.endpoint_id
    WHERE ds.endpoint_id = ANY (ARRAY(SELECT s.endpoint_id FROM new_submission s WHERE s.spam))
      AND ds.removed_at IS NULL AND 'submission.received' = ANY (ds.events)
      AND e.deleted_at IS NULL
), result AS (
    SELECT s.id,
           CASE WHEN s.spam
                THEN s.endpoint_id IN (SELECT e.endpoint_id FROM spam_endpoint e)
                ELSE EXISTS (SELECT 1 FROM new_delivery d WHERE d.submission_id = s.id)
           END AS delivery_queued,
           c.id AS delivery_id, c.claim_token, c.destination_id, q.kind,
           c.destination_url, c.signing_secret, r.secret AS destination_secret,
           r.previous_secret, r.consecutive_failed_deliveries,
           (SELECT count(*) FROM notified) AS notified
    FROM new_submission s
    LEFT JOIN new_delivery c ON c.submission_id = s.id AND c.state = 'processing'
    LEFT JOIN room r ON r.destination_id = c.destination_id
    LEFT JOIN queued q ON q.delivery_id = c.id
)
