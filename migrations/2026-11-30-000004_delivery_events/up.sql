-- The change feed behind GraphQL subscriptions (SPEC section 8): one row per committed
-- state change of a delivery, in the transaction that made the change.
--
-- A row trigger writes the event, so no statement that changes a delivery (the outbox
-- insert, claims, recorded attempts, replays, hand-backs, or an operator's own SQL) can
-- forget it, and a rolled-back change leaves no event. Ids come from a sequence inside
-- the transaction, after the delivery row was written and while its row lock is held, so
-- per delivery they follow commit order; across deliveries the reader in each process
-- publishes an id only once every transaction that could still commit a smaller one has
-- ended (see src/events/feed.rs). Every event also sends a NOTIFY, which PostgreSQL
-- delivers at commit to every listening process.
--
-- No foreign key to webhook_deliveries: deliveries are never deleted (retention removes
-- submissions only), and a key check per event would sit on every hot path.

CREATE TABLE delivery_events (
    id             bigint GENERATED ALWAYS AS IDENTITY,
    delivery_id    varchar(36) NOT NULL,
    endpoint_id    varchar(64) NOT NULL,
    kind           varchar(32) NOT NULL,
    state          varchar(16) NOT NULL,
    previous_state varchar(16) NULL,
    attempts       integer     NOT NULL,
    cycle_attempts integer     NOT NULL,
    outcome        varchar(32) NULL,
    occurred_at    timestamptz NOT NULL,
    CONSTRAINT delivery_events_pkey PRIMARY KEY (id),
    CONSTRAINT delivery_events_kind CHECK (kind IN ('created', 'claimed', 'attempt_recorded',
        'late_attempt_recorded', 'replayed', 'handed_back', 'failed_without_attempt', 'changed')),
    CONSTRAINT delivery_events_state CHECK (state IN ('pending', 'processing', 'delivered', 'failed')),
    CONSTRAINT delivery_events_previous_state CHECK (
        previous_state IN ('pending', 'processing', 'delivered', 'failed'))
);

-- Pruning finds the old end by time; a BRIN index costs next to nothing to maintain on an
-- append-only table whose times rise with its ids.
CREATE INDEX delivery_events_occurred_at_brin ON delivery_events USING brin (occurred_at);

-- The highest event id ever pruned: a subscriber resuming from before it has lost events
-- and is told so instead of getting a silent gap.
CREATE TABLE delivery_event_retention (
    singleton      boolean NOT NULL DEFAULT true,
    pruned_through bigint  NOT NULL,
    CONSTRAINT delivery_event_retention_pkey PRIMARY KEY (singleton),
    CONSTRAINT delivery_event_retention_singleton CHECK (singleton)
);
INSERT INTO delivery_event_retention (singleton, pruned_through) VALUES (true, 0);

CREATE FUNCTION record_delivery_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_kind varchar(32);
    previous   varchar(16);
    attempt_outcome varchar(32);
BEGIN
    IF TG_OP = 'INSERT' THEN
        event_kind := 'created';
    ELSE
        previous := OLD.state;
        IF NEW.attempts > OLD.attempts THEN
            -- The owner's record clears its claim; a late worker's leaves the row's claim.
            IF OLD.claim_token IS NOT NULL AND NEW.claim_token IS NULL THEN
                event_kind := 'attempt_recorded';
            ELSE
                event_kind := 'late_attempt_recorded';
            END IF;
            -- Inserted by the same statement; an AFTER trigger sees it.
            SELECT a.outcome INTO attempt_outcome FROM delivery_attempts a
            WHERE a.delivery_id = NEW.id AND a.attempt_number = NEW.attempts;
        ELSIF NEW.state = 'processing' AND NEW.claim_token IS DISTINCT FROM OLD.claim_token
              AND NEW.claim_token IS NOT NULL THEN
            event_kind := 'claimed';
        ELSIF OLD.state = 'failed' AND NEW.state = 'pending' THEN
            event_kind := 'replayed';
        ELSIF OLD.state = 'processing' AND NEW.state = 'pending' THEN
            event_kind := 'handed_back';
        ELSIF OLD.state = 'processing' AND NEW.state = 'failed' THEN
            event_kind := 'failed_without_attempt';
        ELSE
            event_kind := 'changed';
        END IF;
    END IF;
    INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state,
                                 attempts, cycle_attempts, outcome, occurred_at)
    VALUES (NEW.id, NEW.endpoint_id, event_kind, NEW.state, previous,
            NEW.attempts, NEW.cycle_attempts, attempt_outcome, statement_timestamp());
    -- Identical notifications of one transaction are folded into one by PostgreSQL.
    PERFORM pg_notify('hymical_delivery_event', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_deliveries_record_event_inserts
    AFTER INSERT ON webhook_deliveries
    FOR EACH ROW EXECUTE FUNCTION record_delivery_event();
CREATE TRIGGER webhook_deliveries_record_event_updates
    AFTER UPDATE ON webhook_deliveries
    FOR EACH ROW WHEN (
        OLD.state IS DISTINCT FROM NEW.state
        OR OLD.attempts IS DISTINCT FROM NEW.attempts
        OR OLD.claim_token IS DISTINCT FROM NEW.claim_token
    )
    EXECUTE FUNCTION record_delivery_event();
