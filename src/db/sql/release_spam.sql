-- Marks a submission of the spam folder not spam and queues its deliveries, in one
-- statement: as if it had just arrived, one delivery per destination of its endpoint
-- that receives `submission.received` as the destinations are now (outbox_insert_batch.sql
-- has the same rules: a key-share lock against a concurrent removal, an autoresponder's
-- confirmation at most once per mailbox per window, its key folding case, a `+tag` and
-- dots as docs/delivery.md "Autoresponders" says), each due at once. Only a submission
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
), live_destination AS MATERIALIZED (
    SELECT ds.id, ds.endpoint_id, ds.kind,
           destination_snapshot_url(ds.kind, ds.url, ds.recipients, ds.reply_to_field) AS url,
           ds.secret, ds.reply_to_field, ds.reply_window_seconds
    FROM destinations ds
    JOIN endpoints e ON e.id = ds.endpoint_id
    WHERE ds.endpoint_id = (SELECT r.endpoint_id FROM released r) AND ds.removed_at IS NULL
      AND 'submission.received' = ANY (ds.events)
      AND e.deleted_at IS NULL
    FOR KEY SHARE OF ds, e
), autoresponse AS (
    INSERT INTO autoresponder_recipients AS r
        (destination_id, address_digest, quiet_until, submission_id)
    SELECT ld.id, autoresponder_address_digest(a.address),
           coalesce($2, statement_timestamp()) + make_interval(secs => ld.reply_window_seconds),
           s.id
    FROM released s
    JOIN live_destination ld ON ld.kind = 'autoresponder'
    CROSS JOIN LATERAL (
        SELECT submitted_address(s.fields, ld.reply_to_field) AS address
    ) a
    WHERE a.address IS NOT NULL
    ON CONFLICT (destination_id, address_digest) DO UPDATE
        SET quiet_until = excluded.quiet_until, submission_id = excluded.submission_id
        WHERE r.quiet_until <= coalesce($2, statement_timestamp())
    RETURNING r.destination_id
), new_delivery AS (
    INSERT INTO webhook_deliveries
        (id, submission_id, endpoint_id, destination_id, destination_url, signing_secret,
         state, attempts, cycle_attempts, next_attempt_at, created_at)
    SELECT 'whd_' || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
               || substr(md5(random()::text || s.id || ld.id), 1, 20),
           s.id, s.endpoint_id, ld.id, ld.url, ld.secret,
           'pending', 0, 0, coalesce($2, statement_timestamp()),
           coalesce($2, statement_timestamp())
    FROM released s
    JOIN live_destination ld
      ON ld.kind <> 'autoresponder'
         OR EXISTS (SELECT 1 FROM autoresponse a WHERE a.destination_id = ld.id)
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
