-- What a claim (claim.sql) and a slot handed on (hand_on.sql) have in common, after their
-- `expired` (leases that ran out, taken first) and `due` (pending deliveries, locked):
-- each is claimed with a fresh token and lease, throttled destinations' rates move on,
-- and what the request needs is read. $1 now (NULL: the database's clock), $2 lease.
, picked AS (
    SELECT e.id, e.state FROM expired e
    UNION ALL
    SELECT d.id, d.state FROM due d
), claimed AS (
    UPDATE webhook_deliveries d
    SET state = 'processing',
        claim_token = 'clm_' || replace(gen_random_uuid()::text, '-', ''),
        claim_expires_at = coalesce($1, statement_timestamp()) + $2
    WHERE d.id = ANY (ARRAY(SELECT p.id FROM picked p))
    RETURNING d.id, d.claim_token, d.endpoint_id, d.destination_id, d.destination_url,
              d.signing_secret, d.submission_id, d.state, d.attempts, d.cycle_attempts,
              (SELECT p.state FROM picked p WHERE p.id = d.id) AS previous_state
), throttled AS (
    -- A throttled destination's rate moves on by the requests this claim starts (see
    -- throttle_allowance, migration destinations). Concurrent claims of one destination
    -- update its row in turn, each from the other's result.
    INSERT INTO destination_throttles AS t (destination_id, next_at)
    SELECT n.destination_id,
           coalesce($1, statement_timestamp())
               + n.started * (interval '1 second' / ds.max_requests_per_second)
    FROM (SELECT c.destination_id, count(*) AS started FROM claimed c
          GROUP BY c.destination_id) n
    JOIN destinations ds ON ds.id = n.destination_id
    WHERE ds.max_requests_per_second IS NOT NULL
    ORDER BY n.destination_id
    ON CONFLICT (destination_id) DO UPDATE
        SET next_at = greatest(t.next_at, coalesce($1, statement_timestamp()))
                      + (excluded.next_at - coalesce($1, statement_timestamp()))
), changes AS (
    SELECT id AS delivery_id, endpoint_id, 'claimed'::varchar AS kind, state,
           previous_state, attempts, cycle_attempts, NULL::varchar AS outcome
    FROM claimed
), result AS (
    -- With the destination's kind, its live secrets when the delivery goes where it now
    -- points (a delivery to an earlier URL is never signed with a later receiver's
    -- secret), and its run of failed deliveries; what an email or an autoresponder's
    -- message is made of.
    SELECT c.id, c.claim_token, c.endpoint_id, c.destination_id, ds.kind, c.destination_url,
           c.signing_secret, c.submission_id, c.cycle_attempts, s.received_at, s.fields,
           CASE WHEN ds.url = c.destination_url THEN ds.secret END AS destination_secret,
           CASE WHEN ds.url = c.destination_url
                 AND ds.previous_secret_expires_at > coalesce($1, statement_timestamp())
                THEN ds.previous_secret END AS destination_previous_secret,
           ds.consecutive_failed_deliveries,
           CASE WHEN ds.kind = 'email' OR ds.body_format <> 'standard' THEN e.name END
               AS endpoint_name,
           ds.reply_to_field, ds.reply_subject, ds.reply_body,
           -- Whether the submission has uploaded files, which the worker then reads for
           -- the payload: one index probe here rather than a round trip per delivery.
           EXISTS (SELECT 1 FROM submission_files f WHERE f.submission_id = c.submission_id)
               AS has_files,
           ds.body_format, ds.body_template, ds.email_template,
           -- Its own headers, authentication and Ed25519 key, for its current URL only (as its live
           -- secrets); its own retry schedule whatever the URL.
           CASE WHEN ds.url = c.destination_url THEN ds.request_headers END AS request_headers,
           CASE WHEN ds.url = c.destination_url THEN ds.request_auth END AS request_auth,
           CASE WHEN ds.url = c.destination_url THEN ds.ed25519_key END AS ed25519_key,
           -- Its TLS client certificate, key and extra CA, for its current URL only too.
           CASE WHEN ds.url = c.destination_url THEN ds.client_certificate END
               AS client_certificate,
           CASE WHEN ds.url = c.destination_url THEN ds.client_key END AS client_key,
           CASE WHEN ds.url = c.destination_url THEN ds.client_ca END AS client_ca,
           ds.retry_policy,
           -- The trace its submission was accepted in (NULL: traces were off), which the
           -- attempt continues.
           s.trace_parent
    FROM claimed c
    JOIN destinations ds ON ds.id = c.destination_id
    JOIN endpoints e ON e.id = c.endpoint_id
    LEFT JOIN submissions s ON s.id = c.submission_id
)
