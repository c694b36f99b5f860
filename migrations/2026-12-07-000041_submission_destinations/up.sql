-- What a submission is delivered to, the one rule the outbox (outbox_insert_batch.sql)
-- and the spam release (release_spam.sql) both queue by: one delivery for every
-- destination of its endpoint that is not removed and receives `submission.received`
-- (a webhook: its URL and secret as they are now; an email: a `mailto:` of its
-- recipients; an autoresponder: `autoresponder:` and its address field), in position
-- order, the first flagged `first`.
--
-- The destinations and their endpoints are read under a key-share lock (the one the
-- foreign key checks take anyway): it waits for a concurrent deleteEndpoint or
-- removeDestination, and then the rows are read again, so no delivery is made for an
-- endpoint deleted or a destination removed meanwhile, and a delete sees every delivery
-- queued before it.
--
-- An autoresponder answers a submission whose field holds exactly one plain address
-- (what the worker checks again: email.rs `submitter_address`), at most once per mailbox
-- per its window (the address keyed by autoresponder_address_digest: case, `+tag` and
-- local-part dots folded): the first of the submissions given that names an address
-- takes it, and an address answered before gets its row back only once its quiet time
-- has passed (the row lock of `ON CONFLICT` orders concurrent callers). Only an
-- autoresponder whose row this call wrote gets a delivery.
--
-- p_submissions, p_endpoints, p_fields: one element per submission, in the order they
-- were accepted; p_now: the time the autoresponders' windows count from.
--
-- ROWS 30: about what one call returns (a batch of submissions, a destination or two
-- each). With the default estimate (1,000) the planner priced the outbox statement's
-- generic plan far above its custom ones and planned every execution anew: 1 ms more a
-- batch, a quarter of intake's throughput (docs/BENCHMARKS.md, intake, "What we tried").
CREATE FUNCTION submission_destinations(p_submissions varchar[], p_endpoints varchar[],
                                        p_fields json[], p_now timestamptz)
RETURNS TABLE (submission_id varchar, destination_id varchar, kind varchar, url varchar,
               secret varchar, first boolean)
LANGUAGE plpgsql ROWS 30 AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH live_destination AS MATERIALIZED (
        SELECT ds.id, ds.endpoint_id, ds.kind, ds.position,
               destination_snapshot_url(ds.kind, ds.url, ds.recipients, ds.reply_to_field)
                   AS url,
               ds.secret, ds.reply_to_field, ds.reply_window_seconds
        FROM destinations ds
        JOIN endpoints e ON e.id = ds.endpoint_id
        WHERE ds.endpoint_id = ANY (p_endpoints) AND ds.removed_at IS NULL
          AND 'submission.received' = ANY (ds.events)
          AND e.deleted_at IS NULL
        FOR KEY SHARE OF ds, e
    ), given AS (
        SELECT g.id, g.endpoint_id, g.fields, g.position
        FROM unnest(p_submissions, p_endpoints, p_fields)
             WITH ORDINALITY AS g (id, endpoint_id, fields, position)
    ), autoresponse AS (
        INSERT INTO autoresponder_recipients AS r
            (destination_id, address_digest, quiet_until, submission_id)
        SELECT DISTINCT ON (c.destination_id, c.digest)
               c.destination_id, c.digest,
               p_now + make_interval(secs => c.reply_window_seconds), c.submission_id
        FROM (
            SELECT ld.id AS destination_id, ld.reply_window_seconds, g.id AS submission_id,
                   g.position, autoresponder_address_digest(a.address) AS digest
            FROM given g
            JOIN live_destination ld
              ON ld.endpoint_id = g.endpoint_id AND ld.kind = 'autoresponder'
            CROSS JOIN LATERAL (
                SELECT submitted_address(g.fields, ld.reply_to_field) AS address
            ) a
            WHERE a.address IS NOT NULL
        ) c
        ORDER BY c.destination_id, c.digest, c.position
        ON CONFLICT (destination_id, address_digest) DO UPDATE
            SET quiet_until = excluded.quiet_until, submission_id = excluded.submission_id
            WHERE r.quiet_until <= p_now
        RETURNING r.destination_id, r.submission_id
    )
    SELECT g.id::varchar, d.id::varchar, d.kind::varchar, d.url::varchar, d.secret::varchar,
           d.first
    FROM given g
    CROSS JOIN LATERAL (
        SELECT ld.*, row_number() OVER (ORDER BY ld.position) = 1 AS first
        FROM live_destination ld
        WHERE ld.endpoint_id = g.endpoint_id
          AND (ld.kind <> 'autoresponder'
               OR EXISTS (SELECT 1 FROM autoresponse a
                          WHERE a.destination_id = ld.id AND a.submission_id = g.id))
    ) d
    ORDER BY g.position, d.position;
END
$$;
