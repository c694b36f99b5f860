-- The room function as migration receiver_options made it, then the columns (a
-- destination authenticating with OAuth2 is left without an authentication).
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

UPDATE destinations SET request_auth = NULL WHERE request_auth->>'kind' = 'oauth2';
ALTER TABLE destinations
    DROP CONSTRAINT destinations_client_identity_whole,
    DROP COLUMN client_certificate,
    DROP COLUMN client_key,
    DROP COLUMN client_ca,
    DROP CONSTRAINT destinations_request_auth_kind,
    ADD CONSTRAINT destinations_request_auth_kind
        CHECK (request_auth IS NULL OR request_auth->>'kind' IN ('basic', 'bearer'));
