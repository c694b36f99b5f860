-- The change feed behind GraphQL subscriptions (docs/subscriptions.md): one row per committed
-- state change of a delivery, written by the statement that makes the change, in its
-- transaction (src/db/: the outbox insert, the claim, the attempt record, replays,
-- hand-backs). A rolled-back change leaves no event. Those statements also send a NOTIFY,
-- which PostgreSQL delivers at commit to every listening process.
--
-- Ids come from the identity sequence inside the transaction, after the delivery row was
-- written and while its row lock is held, so per delivery they follow commit order; across
-- deliveries the reader in each process publishes an id only once every transaction that
-- could still commit a smaller one has ended (see src/feed/mod.rs).
--
-- Written by the statements rather than by a row trigger: a PL/pgSQL call per changed row
-- cost the intake about a fifth of its throughput (docs/BENCHMARKS.md), the same insert as
-- a CTE of the statement about half that.
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
        'late_attempt_recorded', 'replayed', 'handed_back', 'failed_without_attempt')),
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
