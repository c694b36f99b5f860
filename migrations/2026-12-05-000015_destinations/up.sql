-- Destinations: an endpoint delivers each submission to every one of its destinations, a
-- webhook (its own URL, secret, rotation, pause state and in-flight cap) or an email
-- address list, each delivery with its own state, history, schedule and replay
-- (docs/delivery.md, "Destinations"; docs/data-model.md).
--
-- What was the endpoint's webhook becomes its first webhook destination (position 1),
-- with its secrets, its pause and its run of failures. The endpoint's own webhook and
-- pause columns stay for processes of the previous release during a rolling upgrade
-- (docs/operations.md): this release no longer reads or writes them (but clears them on
-- delete, as the tombstone check asks), and the next one drops them.
--
-- Everything here changes the catalog or small tables (the queue, not the history, each
-- state read through its partial index), so the locks it takes on webhook_deliveries are
-- held for moments (measured: docs/BENCHMARKS.md); the indexes the new
-- claim reads are built without blocking writes by the next migration
-- (destination_indexes). A lock not granted within 10 s fails the migration rather than
-- queueing every request behind it; running it again is safe.
SET LOCAL lock_timeout = '10s';

CREATE TABLE destinations (
    id                            varchar(36)   NOT NULL,
    endpoint_id                   varchar(64)   NOT NULL,
    kind                          varchar(16)   NOT NULL,
    -- Its place among the endpoint's destinations; the first webhook is what
    -- `Endpoint.webhookUrl` reads and writes.
    position                      integer       NOT NULL,
    url                           varchar(2048),
    secret                        varchar(70),
    previous_secret               varchar(70),
    previous_secret_expires_at    timestamptz,
    -- An email destination's addresses, and the form field whose value (one plain
    -- address) becomes the message's Reply-To (NULL: none).
    recipients                    varchar(320)[],
    reply_to_field                varchar(128),
    -- Requests in flight to it at once, across every worker (NULL: the workers' default,
    -- FORMS_WORKER_ENDPOINT_CONCURRENCY).
    max_in_flight                 integer,
    -- The event types it receives (a submission is made a delivery only for the
    -- destinations whose list holds `submission.received`).
    events                        varchar(64)[] NOT NULL DEFAULT '{submission.received}',
    -- Requests started to it per second, across every process (NULL: unthrottled; its
    -- state is in destination_throttles).
    max_requests_per_second       integer,
    paused_at                     timestamptz,
    pause_reason                  varchar(32),
    consecutive_failed_deliveries integer       NOT NULL DEFAULT 0,
    created_at                    timestamptz   NOT NULL DEFAULT now(),
    -- Removed with its history kept: no delivery is made for it any more.
    removed_at                    timestamptz,
    CONSTRAINT destinations_pkey PRIMARY KEY (id),
    CONSTRAINT destinations_id_format CHECK (length(id) = 36 AND id ~ '^dst_[0-9a-f]+$'),
    CONSTRAINT destinations_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id),
    CONSTRAINT destinations_endpoint_position_unique UNIQUE (endpoint_id, position),
    CONSTRAINT destinations_kind_valid CHECK (kind IN ('webhook', 'email')),
    CONSTRAINT destinations_webhook_fields CHECK (
        kind <> 'webhook'
        OR (url IS NOT NULL AND secret IS NOT NULL AND recipients IS NULL)),
    CONSTRAINT destinations_email_fields CHECK (
        kind <> 'email'
        OR (url IS NULL AND secret IS NULL AND previous_secret IS NULL
            AND cardinality(recipients) >= 1 AND array_position(recipients, NULL) IS NULL)),
    CONSTRAINT destinations_secret_format
        CHECK (secret IS NULL OR secret ~ '^whsec_[0-9a-f]{64}$'),
    CONSTRAINT destinations_previous_secret_and_expiry_together
        CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL)),
    CONSTRAINT destinations_previous_secret_format
        CHECK (previous_secret IS NULL OR previous_secret ~ '^whsec_[0-9a-f]{64}$'),
    CONSTRAINT destinations_max_in_flight_positive
        CHECK (max_in_flight IS NULL OR max_in_flight >= 1),
    CONSTRAINT destinations_events_known
        CHECK (cardinality(events) >= 1 AND events <@ '{submission.received}'::varchar[]),
    CONSTRAINT destinations_max_requests_per_second_positive
        CHECK (max_requests_per_second IS NULL OR max_requests_per_second >= 1),
    CONSTRAINT destinations_pause_reason_with_pause
        CHECK ((paused_at IS NULL) = (pause_reason IS NULL)),
    CONSTRAINT destinations_pause_reason_valid
        CHECK (pause_reason IN ('gone', 'failure_threshold', 'operator')),
    CONSTRAINT destinations_consecutive_failed_deliveries_non_negative
        CHECK (consecutive_failed_deliveries >= 0),
    CONSTRAINT destinations_removed_is_bare
        CHECK (removed_at IS NULL OR (paused_at IS NULL AND previous_secret IS NULL))
);

INSERT INTO destinations
    (id, endpoint_id, kind, position, url, secret, previous_secret,
     previous_secret_expires_at, paused_at, pause_reason, consecutive_failed_deliveries,
     created_at)
SELECT 'dst_' || replace(gen_random_uuid()::text, '-', ''), e.id, 'webhook', 1,
       e.webhook_url, e.webhook_secret, e.previous_webhook_secret,
       e.previous_secret_expires_at, e.paused_at, e.pause_reason,
       e.consecutive_failed_deliveries, e.created_at
FROM endpoints e
WHERE e.webhook_url IS NOT NULL AND e.deleted_at IS NULL;

-- Each delivery names its destination. Adding the column (NULL, no default) and the
-- foreign key (NOT VALID: existing rows are not scanned; new ones are checked) writes no
-- row. The queue (pending and processing, read through their partial indexes) is given
-- its endpoint's webhook destination (by migration queue_destinations); delivered and
-- failed history keeps NULL,
-- read as the destination made here for its endpoint (position 1, a webhook, created
-- with the endpoint: so never a webhook added later at position 1 of an endpoint that
-- had none), and a replay fills it in.
ALTER TABLE webhook_deliveries
    ADD COLUMN destination_id varchar(36),
    ADD CONSTRAINT webhook_deliveries_destination_id_fkey
        FOREIGN KEY (destination_id) REFERENCES destinations (id) NOT VALID,
    -- An email delivery has no signing secret (its `destination_url` is a `mailto:` of
    -- its recipients, the snapshot an email delivery keeps).
    ALTER COLUMN signing_secret DROP NOT NULL;
-- The queue's rows are given their destination by migration queue_destinations, after
-- this one commits: an UPDATE here would run under the exclusive lock the ALTER above
-- holds until the commit, and on a large history that lock held every reader and writer
-- of deliveries for as long as the UPDATE took (docs/BENCHMARKS.md).

-- An email attempt's SMTP reply: its code in response_status (SMTP codes are 2xx–5xx,
-- within that column's range), its text here, one printable line of at most 500
-- characters. Two outcomes of email: the server answered 4xx or 5xx (`smtp_error`), or
-- the message could not be built for its recipients, so nothing was sent
-- (`unsendable`). The new outcome rule is NOT VALID here (no scan of the attempt history
-- under this migration's lock); destination_indexes validates it without blocking
-- writes.
ALTER TABLE delivery_attempts
    ADD COLUMN reply varchar(500),
    DROP CONSTRAINT delivery_attempts_outcome_valid,
    ADD CONSTRAINT delivery_attempts_outcome_valid CHECK (
        outcome IN ('succeeded', 'http_error', 'timeout', 'network_error',
                    'blocked_destination', 'smtp_error', 'unsendable')
    ) NOT VALID;

-- A destination's pause and resume are endpoint events too, naming it.
ALTER TABLE endpoint_events ADD COLUMN destination_id varchar(36);

-- Throttling (docs/delivery.md, "Throttling"): a destination with
-- max_requests_per_second r lets a request start every 1/r s, with a burst tolerance of
-- throttle_burst(): a generic cell rate algorithm whose state is next_at, the time the
-- next request is due by the rate (no row: none was started yet). At p_now, a claim may
-- start as many requests as fit before p_now + burst at 1/r s apart; claim.sql moves
-- next_at on by what it started. In any second at most r requests start, plus those the
-- burst lets through early (a tenth of a second's worth, and one).
--
-- Only claims write it, under the destination's claim lock, so the rate holds across
-- processes. It is a table apart from destinations, and without a foreign key, so that a
-- claim (which holds claim locks) never waits for a destination's row lock: a pause holds
-- that row lock while it waits for the claim lock. Rows of erased destinations are
-- deleted with them.
CREATE TABLE destination_throttles (
    destination_id varchar(36) NOT NULL,
    next_at        timestamptz NOT NULL,
    CONSTRAINT destination_throttles_pkey PRIMARY KEY (destination_id)
);
CREATE FUNCTION throttle_burst() RETURNS interval
LANGUAGE sql IMMUTABLE AS $$ SELECT interval '100 milliseconds' $$;

-- How many requests a destination may start at p_now (2147483647 when unthrottled).
CREATE FUNCTION throttle_allowance(p_rate integer, p_next_at timestamptz, p_now timestamptz)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_rate IS NULL THEN 2147483647
        ELSE greatest(
            floor(extract(epoch FROM (p_now + throttle_burst()
                                      - greatest(coalesce(p_next_at, p_now), p_now)))
                  * p_rate)::bigint + 1,
            0)
    END
$$;

-- Destinations with a delivery due at p_now and room under their cap (p_cap unless the
-- destination sets its own), oldest due delivery first, at most p_limit of them, each
-- locked for the rest of the transaction; with how many more requests each may start.
-- Destinations another claim holds right now are skipped: that claim is serving them.
-- As claimable_endpoints did per endpoint (migrations fair_claiming and
-- claim_reads_per_endpoint: a skip scan, a range and both columns in the order, so that
-- only webhook_deliveries_pending_destination_due_idx serves the reads).
CREATE FUNCTION claimable_destinations(p_now timestamptz, p_limit integer, p_cap integer)
RETURNS TABLE (destination_id varchar, free_slots integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_serving varchar[] := '{}';
    v_destination varchar;
BEGIN
    FOR v_destination IN
        WITH RECURSIVE queued(destination_id) AS (
            (SELECT w.destination_id FROM webhook_deliveries w
             WHERE w.state = 'pending' AND w.destination_id IS NOT NULL
             ORDER BY w.destination_id LIMIT 1)
            UNION ALL
            SELECT (SELECT w.destination_id FROM webhook_deliveries w
                    WHERE w.state = 'pending' AND w.destination_id > q.destination_id
                    ORDER BY w.destination_id LIMIT 1)
            FROM queued q
            WHERE q.destination_id IS NOT NULL
        )
        SELECT q.destination_id
        FROM queued q
        CROSS JOIN LATERAL (
            SELECT w.next_attempt_at AS head FROM webhook_deliveries w
            WHERE w.state = 'pending'
              AND w.destination_id >= q.destination_id AND w.destination_id <= q.destination_id
            ORDER BY w.destination_id, w.next_attempt_at LIMIT 1
        ) h
        JOIN destinations ds ON ds.id = q.destination_id
        WHERE q.destination_id IS NOT NULL
          AND h.head <= p_now
          -- A paused destination's deliveries wait, untouched, until it is resumed.
          AND ds.paused_at IS NULL
          -- A throttled destination whose next request may not start yet waits too.
          AND (ds.max_requests_per_second IS NULL
               OR throttle_allowance(ds.max_requests_per_second,
                                     (SELECT t.next_at FROM destination_throttles t
                                      WHERE t.destination_id = ds.id), p_now) > 0)
          -- A first look at the room (this snapshot may be stale); exact below.
          AND (SELECT count(*) FROM webhook_deliveries w
               WHERE w.state = 'processing' AND w.destination_id = q.destination_id)
              < coalesce(ds.max_in_flight, p_cap)
        ORDER BY h.head
    LOOP
        -- 1752788324: "hymd" in ASCII, this service's class of advisory locks.
        IF pg_try_advisory_xact_lock(1752788324, hashtext(v_destination)) THEN
            v_serving := v_serving || v_destination;
            EXIT WHEN cardinality(v_serving) >= p_limit;
        END IF;
    END LOOP;
    -- A new snapshot: every claim committed before the locks were taken is counted, and a
    -- pause committed before (a pause takes the destination's lock) is seen, as is the
    -- throttle state the last claim of a throttled destination left (claims of one
    -- destination hold its lock in turn, so its rate holds across processes).
    RETURN QUERY
    SELECT s.destination_id,
           greatest(least(coalesce(ds.max_in_flight, p_cap)
                          - (SELECT count(*) FROM webhook_deliveries w
                             WHERE w.state = 'processing'
                               AND w.destination_id = s.destination_id),
                          throttle_allowance(ds.max_requests_per_second,
                                             (SELECT t.next_at FROM destination_throttles t
                                              WHERE t.destination_id = ds.id), p_now)),
                    0)::integer
    FROM unnest(v_serving) AS s(destination_id)
    JOIN destinations ds ON ds.id = s.destination_id
    WHERE ds.paused_at IS NULL;
END
$$;

-- Claiming at intake, per destination (as intake_claim_room did per endpoint, migrations
-- claim_at_intake and intake_claim_room_reads_after_lock): for each destination locked,
-- its room, and its URL, live secrets and run of failures as they are after the lock.
CREATE FUNCTION intake_claim_destination_room(p_destinations varchar[], p_now timestamptz,
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
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
                      WHERE w.state = 'pending' AND w.destination_id = s.destination_id
                        AND w.next_attempt_at <= p_now)
    ORDER BY s.position;
END
$$;

-- The previous release's claiming functions claim nothing any more: a worker of that
-- release still running during an upgrade finds nothing to claim, and its intake writes
-- its deliveries pending, without a destination, which this release's claim gives the
-- endpoint's first webhook destination (claim.sql). The next release drops them.
CREATE OR REPLACE FUNCTION claimable_endpoints(p_now timestamptz, p_limit integer, p_cap integer)
RETURNS TABLE (endpoint_id varchar, free_slots integer)
LANGUAGE sql STABLE AS $$ SELECT NULL::varchar, 0 WHERE false $$;
DROP FUNCTION intake_claim_room(varchar[], timestamptz, integer, integer);
CREATE FUNCTION intake_claim_room(p_endpoints varchar[], p_now timestamptz, p_limit integer,
                                  p_cap integer)
RETURNS TABLE (endpoint_id varchar, free_slots integer, webhook_url varchar,
               webhook_secret varchar, previous_secret varchar,
               consecutive_failed_deliveries integer)
LANGUAGE sql STABLE AS $$
    SELECT NULL::varchar, 0, NULL::varchar, NULL::varchar, NULL::varchar, 0 WHERE false
$$;
