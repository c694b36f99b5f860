-- How a webhook receiver is called beyond its URL and HMAC signature (model/receiver.rs):
-- the body's format (this service's JSON or a chat platform's message) or its own body
-- template (model/template.rs), its own static headers, its authentication, an Ed25519 signing key (Standard Webhooks
-- `v1a`, beside the HMAC `v1`), and a destination's own retry schedule. Each
-- is NULL or empty for the destinations made before, which go on as they did. The
-- destinations table holds a few rows per endpoint: the checks are validated at once.
ALTER TABLE destinations
    ADD COLUMN body_format varchar(16) NOT NULL DEFAULT 'standard'
        CONSTRAINT destinations_body_format_valid
        CHECK (body_format IN ('standard', 'slack', 'discord', 'teams', 'mattermost', 'google_chat')),
    ADD COLUMN body_template text
        CONSTRAINT destinations_body_template_length
        CHECK (char_length(body_template) BETWEEN 1 AND 20000),
    ADD CONSTRAINT destinations_template_or_chat
        CHECK (body_template IS NULL OR body_format = 'standard'),
    ADD COLUMN request_headers jsonb NOT NULL DEFAULT '[]'
        CONSTRAINT destinations_request_headers_list
        CHECK (jsonb_typeof(request_headers) = 'array' AND jsonb_array_length(request_headers) <= 20),
    ADD COLUMN request_auth jsonb
        CONSTRAINT destinations_request_auth_kind
        CHECK (request_auth IS NULL OR request_auth->>'kind' IN ('basic', 'bearer')),
    ADD COLUMN ed25519_key varchar(49)
        CONSTRAINT destinations_ed25519_key_format
        CHECK (ed25519_key ~ '^whsk_[A-Za-z0-9+/]{43}=$'),
    -- {"max_attempts", "first_wait_ms", "max_wait_ms"}: one document, so the table stays
    -- within the 32 columns its Rust mapping takes.
    ADD COLUMN retry_policy jsonb
        CONSTRAINT destinations_retry_policy_valid CHECK (
            retry_policy IS NULL
            OR ((retry_policy->>'max_attempts')::integer BETWEEN 1 AND 1000
                AND (retry_policy->>'first_wait_ms')::bigint >= 1
                AND (retry_policy->>'max_wait_ms')::bigint
                    >= (retry_policy->>'first_wait_ms')::bigint));

-- Intake claims only a plain webhook's first delivery (what its statement returns is the
-- URL and the secrets); a destination with a chat format or a template, headers, an authentication, an Ed25519 key or
-- its own retry schedule is claimed by the workers' claim, which reads them
-- (claim_take.sql). As in
-- migration destinations, but for that last condition.
CREATE OR REPLACE FUNCTION intake_claim_destination_room(p_destinations varchar[], p_now timestamptz,
                                                         p_limit integer, p_cap integer)
RETURNS TABLE (destination_id varchar, free_slots integer, url varchar, secret varchar,
               previous_secret varchar, consecutive_failed_deliveries integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_locked varchar[] := '{}';
    v_destination varchar;
BEGIN
    IF p_limit <= 0 OR p_destinations IS NULL THEN
        RETURN;
    END IF;
    FOREACH v_destination IN ARRAY p_destinations LOOP
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_destination)) THEN
            v_locked := v_locked || v_destination;
            EXIT WHEN cardinality(v_locked) >= p_limit;
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT s.destination_id, room.free::integer, ds.url, ds.secret,
           CASE WHEN ds.previous_secret_expires_at > p_now THEN ds.previous_secret END,
           ds.consecutive_failed_deliveries
    FROM unnest(v_locked) WITH ORDINALITY AS s(destination_id, position)
    JOIN destinations ds ON ds.id = s.destination_id
    CROSS JOIN LATERAL (
        SELECT coalesce(ds.max_in_flight, p_cap)
               - (SELECT count(*) FROM webhook_deliveries w
                  WHERE w.state = 'processing' AND w.destination_id = s.destination_id) AS free
    ) room
    WHERE room.free > 0
      AND ds.paused_at IS NULL AND ds.removed_at IS NULL
      -- A throttled destination's requests start only through the claim, which keeps
      -- its rate; an email is sent from what the claim reads (claim.sql).
      AND ds.max_requests_per_second IS NULL AND ds.kind = 'webhook'
      AND ds.body_format = 'standard' AND ds.body_template IS NULL
      AND ds.request_headers = '[]' AND ds.request_auth IS NULL
      AND ds.ed25519_key IS NULL AND ds.retry_policy IS NULL
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
                      WHERE w.state = 'pending' AND w.destination_id = s.destination_id
                        AND w.next_attempt_at <= p_now)
    ORDER BY s.position;
END
$$;
