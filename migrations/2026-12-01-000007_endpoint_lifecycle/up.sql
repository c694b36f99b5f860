-- An endpoint's life beyond its settings (docs/data-model.md, docs/delivery.md):
--
-- - Secret rotation with an overlap: the secret a rotation replaced stays live, and is
--   used beside the new one in `webhook-signature`, until `previous_secret_expires_at`.
-- - Pausing: a receiver that answered 410, or an endpoint whose deliveries failed one
--   after another past a threshold (or an operator), pauses the endpoint; nothing is
--   claimed for it until it is resumed. `consecutive_failed_deliveries` is that count,
--   reset by a delivered delivery.
-- - Deleting with its history kept: the row stays as a tombstone (`deleted_at`), so its
--   deliveries keep their endpoint and its id cannot be taken by a new endpoint.
ALTER TABLE endpoints
    ADD COLUMN previous_webhook_secret       varchar(70),
    ADD COLUMN previous_secret_expires_at    timestamptz,
    ADD COLUMN paused_at                     timestamptz,
    ADD COLUMN pause_reason                  varchar(32),
    ADD COLUMN consecutive_failed_deliveries integer NOT NULL DEFAULT 0,
    ADD COLUMN deleted_at                    timestamptz,
    ADD CONSTRAINT endpoints_previous_secret_and_expiry_together
        CHECK ((previous_webhook_secret IS NULL) = (previous_secret_expires_at IS NULL)),
    ADD CONSTRAINT endpoints_previous_secret_format
        CHECK (previous_webhook_secret IS NULL OR previous_webhook_secret ~ '^whsec_[0-9a-f]{64}$'),
    ADD CONSTRAINT endpoints_previous_secret_needs_current
        CHECK (previous_webhook_secret IS NULL OR webhook_secret IS NOT NULL),
    ADD CONSTRAINT endpoints_pause_reason_with_pause
        CHECK ((paused_at IS NULL) = (pause_reason IS NULL)),
    ADD CONSTRAINT endpoints_pause_reason_valid
        CHECK (pause_reason IN ('gone', 'failure_threshold', 'operator')),
    ADD CONSTRAINT endpoints_consecutive_failed_deliveries_non_negative
        CHECK (consecutive_failed_deliveries >= 0),
    ADD CONSTRAINT endpoints_deleted_is_bare CHECK (
        deleted_at IS NULL
        OR (NOT is_active AND webhook_url IS NULL AND paused_at IS NULL));

-- Endpoint state changes for subscribers (Subscription.endpointStateChanged). Rare
-- (an operator's action, a receiver gone), so their writers take one advisory lock
-- (db/endpoints.rs) and commit in id order: a reader that has seen id n has seen every
-- id below it. No foreign key: erasing an endpoint removes its events and writes one
-- last `deleted`.
CREATE TABLE endpoint_events (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    endpoint_id varchar(64) NOT NULL,
    kind        varchar(16) NOT NULL,
    reason      varchar(32),
    occurred_at timestamptz NOT NULL,
    CONSTRAINT endpoint_events_pkey PRIMARY KEY (id),
    CONSTRAINT endpoint_events_kind CHECK (kind IN ('paused', 'resumed', 'deleted')),
    CONSTRAINT endpoint_events_reason CHECK (
        (kind = 'paused') = (reason IS NOT NULL)
        AND (reason IS NULL OR reason IN ('gone', 'failure_threshold', 'operator')))
);
CREATE INDEX endpoint_events_endpoint_id_idx ON endpoint_events (endpoint_id, id);

-- Deleting an endpoint can cancel what it still owes.
ALTER TABLE delivery_events DROP CONSTRAINT delivery_events_kind;
ALTER TABLE delivery_events ADD CONSTRAINT delivery_events_kind CHECK (kind IN ('created',
    'claimed', 'attempt_recorded', 'late_attempt_recorded', 'replayed', 'handed_back',
    'failed_without_attempt', 'cancelled'));

-- Claiming passes paused endpoints by.
CREATE OR REPLACE FUNCTION claimable_endpoints(p_now timestamptz, p_limit integer, p_cap integer)
RETURNS TABLE (endpoint_id varchar, free_slots integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_serving varchar[] := '{}';
    v_endpoint varchar;
BEGIN
    FOR v_endpoint IN
        -- Every endpoint with a pending delivery: a skip scan of the index, one probe per
        -- endpoint however long its queue.
        WITH RECURSIVE queued(endpoint_id) AS (
            (SELECT w.endpoint_id FROM webhook_deliveries w
             WHERE w.state = 'pending'
             ORDER BY w.endpoint_id LIMIT 1)
            UNION ALL
            SELECT (SELECT w.endpoint_id FROM webhook_deliveries w
                    WHERE w.state = 'pending' AND w.endpoint_id > q.endpoint_id
                    ORDER BY w.endpoint_id LIMIT 1)
            FROM queued q
            WHERE q.endpoint_id IS NOT NULL
        )
        SELECT q.endpoint_id
        FROM queued q
        CROSS JOIN LATERAL (
            SELECT w.next_attempt_at AS head FROM webhook_deliveries w
            WHERE w.state = 'pending' AND w.endpoint_id = q.endpoint_id
            ORDER BY w.next_attempt_at LIMIT 1
        ) h
        WHERE q.endpoint_id IS NOT NULL
          AND h.head <= p_now
          -- A paused endpoint's deliveries wait, untouched, until it is resumed.
          AND NOT EXISTS (SELECT 1 FROM endpoints e
                          WHERE e.id = q.endpoint_id AND e.paused_at IS NOT NULL)
          -- A first look at the room (this snapshot may be stale); exact below.
          AND (SELECT count(*) FROM webhook_deliveries w
               WHERE w.state = 'processing' AND w.endpoint_id = q.endpoint_id) < p_cap
        ORDER BY h.head
    LOOP
        -- 1752788324: "hymd" in ASCII, this service's class of advisory locks.
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_endpoint)) THEN
            v_serving := v_serving || v_endpoint;
            EXIT WHEN cardinality(v_serving) >= p_limit;
        END IF;
    END LOOP;
    -- A new snapshot: every claim committed before the locks were taken is counted, and
    -- a pause committed before (a pause takes the endpoint's lock: db/endpoints.rs) is
    -- seen.
    RETURN QUERY
    SELECT s.endpoint_id,
           greatest(p_cap - (SELECT count(*) FROM webhook_deliveries w
                             WHERE w.state = 'processing' AND w.endpoint_id = s.endpoint_id),
                    0)::integer
    FROM unnest(v_serving) AS s(endpoint_id)
    WHERE NOT EXISTS (SELECT 1 FROM endpoints e
                      WHERE e.id = s.endpoint_id AND e.paused_at IS NOT NULL);
END
$$;
