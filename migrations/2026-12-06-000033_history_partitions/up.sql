-- The event log and the attempt history partitioned by time (docs/data-model.md, "The
-- history by partition"): `delivery_events` by `occurred_at` (a partition a day, or a
-- month when events are kept longer than 31 days), `delivery_attempts` by `attempted_at`
-- (a partition a month). Retention drops whole partitions past its horizon instead of
-- deleting rows; the queue (`webhook_deliveries`) is not partitioned and retention never
-- touches it. Partitions are made ahead by the workers' hourly pass
-- (`history_make_partitions`, below), with no extension to install; a DEFAULT partition
-- takes any row outside them (a clock far off, a pass that did not run), so an insert
-- never fails.
--
-- Keys: a unique index of a partitioned table must contain its partition key, and ids
-- with a time beside them are unique only per time. The parents therefore have none;
-- each partition has its own primary key on `id` and, for attempts, its own unique
-- `(delivery_id, attempt_number)`, the indexes the statements use (a partition's indexes
-- serve a query of the parent). Nothing refers to either table by a foreign key.
--
-- An existing table becomes the first partition as it is, with every index, constraint
-- and row, holding everything before the bound history_partition_bounds gave it and
-- history_partition_bounds_validate checked: so the swap below changes the catalog only,
-- under a moment's exclusive lock (measured on 10 million rows: docs/BENCHMARKS.md).
-- An empty table (a new database) is simply replaced, and its partitions start today.
SET LOCAL lock_timeout = '10s';

-- Every partition of a history table, with its bounds (NULL: MINVALUE or MAXVALUE) and
-- whether it is the DEFAULT partition. Read from the catalog, so it cannot drift from it.
CREATE FUNCTION history_partitions(p_parent regclass)
RETURNS TABLE (partition regclass, lower_bound timestamptz, upper_bound timestamptz,
               is_default boolean)
LANGUAGE sql STABLE AS $$
    SELECT c.oid::regclass,
           substring(b.bound FROM 'FROM \(''([^'']+)''\)')::timestamptz,
           substring(b.bound FROM 'TO \(''([^'']+)''\)')::timestamptz,
           b.bound = 'DEFAULT'
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
    WHERE i.inhparent = p_parent
$$;

-- Makes the partitions of `p_parent` (`delivery_events` or `delivery_attempts`) that
-- cover [p_from, p_until), one per `p_unit` ('day' or 'month', aligned in UTC), leaving
-- alone what existing partitions cover; answers how many it made. Idempotent, and
-- serialised by an advisory lock (class "hymp"), so every worker may run it.
--
-- Each partition is made as a table of its own and then attached: attaching takes SHARE
-- UPDATE EXCLUSIVE on the parent, which reads and writes do not wait for (CREATE TABLE
-- ... PARTITION OF would take ACCESS EXCLUSIVE). It does lock the DEFAULT partition, to
-- check that no row there belongs in the new range: rows that do are moved in first
-- (normally there are none, and the check reads an empty table). Attaching an attempt
-- partition also takes SHARE ROW EXCLUSIVE on `webhook_deliveries` and `submissions` for a
-- moment (its foreign keys). A lock not granted within a second fails the call; the next
-- pass makes it.
CREATE FUNCTION history_make_partitions(p_parent regclass, p_unit text, p_from timestamptz,
                                        p_until timestamptz)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_key text := substring(pg_get_partkeydef(p_parent) FROM '^RANGE \((\w+)\)$');
    v_step interval := ('1 ' || p_unit)::interval;
    v_slot timestamptz := date_trunc(p_unit, p_from, 'UTC');
    v_lower timestamptz;
    v_upper timestamptz;
    v_covered timestamptz;
    v_next timestamptz;
    v_default regclass;
    v_name text;
    v_made integer := 0;
BEGIN
    IF v_key IS NULL OR p_unit NOT IN ('day', 'month') THEN
        RAISE EXCEPTION 'history_make_partitions: % is not a history table partitioned by time, or % is not day or month', p_parent, p_unit;
    END IF;
    PERFORM set_config('lock_timeout', '1s', true);
    PERFORM pg_advisory_xact_lock(1752788336, p_parent::oid::integer);
    SELECT partition INTO v_default FROM history_partitions(p_parent) WHERE is_default;
    WHILE v_slot < p_until LOOP
        v_lower := v_slot;
        v_upper := date_trunc(p_unit, v_slot, 'UTC') + v_step;
        WHILE v_lower < v_upper LOOP
            -- Skip what a partition covers; stop at the next one that starts.
            SELECT max(coalesce(upper_bound, 'infinity')) INTO v_covered
            FROM history_partitions(p_parent)
            WHERE NOT is_default AND coalesce(lower_bound, '-infinity') <= v_lower
              AND coalesce(upper_bound, 'infinity') > v_lower;
            IF v_covered IS NOT NULL THEN
                v_lower := v_covered;
                CONTINUE;
            END IF;
            SELECT min(lower_bound) INTO v_next
            FROM history_partitions(p_parent)
            WHERE NOT is_default AND lower_bound > v_lower AND lower_bound < v_upper;
            v_name := format('%s_%s', p_parent::text, to_char(v_lower AT TIME ZONE 'UTC', 'YYYYMMDD'));
            EXECUTE format('CREATE TABLE %I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                           v_name, p_parent);
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id)',
                           v_name, v_name || '_pkey');
            IF p_parent = 'delivery_attempts'::regclass THEN
                EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I UNIQUE (delivery_id, attempt_number)',
                               v_name, v_name || '_delivery_number_unique');
            END IF;
            IF v_default IS NOT NULL THEN
                EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_default);
                EXECUTE format('WITH moved AS (DELETE FROM %s WHERE %I >= $1 AND %I < $2 RETURNING *) '
                               'INSERT INTO %I SELECT * FROM moved',
                               v_default, v_key, v_key, v_name)
                    USING v_lower, coalesce(v_next, v_upper);
            END IF;
            EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           p_parent, v_name, v_lower, coalesce(v_next, v_upper));
            v_made := v_made + 1;
            v_lower := coalesce(v_next, v_upper);
        END LOOP;
        v_slot := v_upper;
    END LOOP;
    RETURN v_made;
END
$$;

-- Drops the oldest partition of `p_parent` that lies wholly before `p_before` (its upper
-- bound at or before it; never the DEFAULT partition) and answers its name, or NULL when
-- there is none. An attempt partition that holds an attempt of a delivery still in the
-- queue (pending or processing) is kept until that delivery is done (the next one past
-- the horizon may go meanwhile). Dropping an event partition moves the feed's pruning mark past its highest id
-- first, in the same transaction (docs/subscriptions.md).
--
-- DROP takes ACCESS EXCLUSIVE on the parent for a moment. DETACH ... CONCURRENTLY would
-- not, but PostgreSQL refuses it on a table with a DEFAULT partition; so the lock is
-- asked for with a short timeout (a second), and a pass that cannot get it leaves the
-- partition to the next.
CREATE FUNCTION history_drop_partition(p_parent regclass, p_before timestamptz)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_partition regclass;
    v_busy boolean;
    v_name text;
BEGIN
    PERFORM set_config('lock_timeout', '1s', true);
    PERFORM pg_advisory_xact_lock(1752788336, p_parent::oid::integer);
    FOR v_partition IN
        SELECT partition FROM history_partitions(p_parent)
        WHERE NOT is_default AND upper_bound <= p_before
        ORDER BY upper_bound
    LOOP
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', p_parent);
        v_busy := false;
        IF p_parent = 'delivery_attempts'::regclass THEN
            -- One statement per state, so that each reads its partial index: the queue,
            -- not the history.
            EXECUTE format(
                'SELECT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.state = ''pending'' '
                '               AND EXISTS (SELECT 1 FROM %1$s a WHERE a.delivery_id = d.id)) '
                '    OR EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.state = ''processing'' '
                '               AND EXISTS (SELECT 1 FROM %1$s a WHERE a.delivery_id = d.id))',
                v_partition) INTO v_busy;
        ELSIF p_parent = 'delivery_events'::regclass THEN
            EXECUTE format(
                'UPDATE delivery_event_retention '
                'SET pruned_through = greatest(pruned_through, '
                '                              coalesce((SELECT max(id) FROM %s), 0))',
                v_partition);
        END IF;
        IF NOT v_busy THEN
            v_name := v_partition::text;
            EXECUTE format('DROP TABLE %s', v_partition);
            RETURN v_name;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- The swap: each parent takes its table's name; the table, renamed `…_initial`, becomes its
-- first partition, from MINVALUE to its bound (or, empty, is dropped). The DEFAULT
-- partitions come last, so that attaching scans no default.
DO $$
DECLARE
    v_table text;
    v_bound timestamptz;
    v_empty boolean;
    v_unit text;
    v_ahead interval;
    v_last bigint;
BEGIN
    -- Every lock the swap needs, taken at once and first: attaching the attempts takes
    -- over their foreign keys, which replaces the triggers those keys keep on
    -- `submissions` and `webhook_deliveries`, under an exclusive lock on each; asked for
    -- later, while a writer holds one of the history tables, that would deadlock.
    LOCK TABLE submissions, webhook_deliveries, delivery_attempts, delivery_events
        IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE delivery_events RENAME TO delivery_events_initial;
    ALTER TABLE delivery_attempts RENAME TO delivery_attempts_initial;

    -- The events' identity continues where the old table's sequence was.
    SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END INTO v_last
    FROM delivery_events_id_seq;
    ALTER TABLE delivery_events_initial ALTER COLUMN id DROP IDENTITY;
    ALTER INDEX delivery_events_occurred_at_brin RENAME TO delivery_events_initial_occurred_at_brin;
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
        CONSTRAINT delivery_events_kind CHECK (kind IN ('created', 'claimed',
            'attempt_recorded', 'late_attempt_recorded', 'replayed', 'handed_back',
            'failed_without_attempt', 'cancelled')),
        CONSTRAINT delivery_events_state CHECK (
            state IN ('pending', 'processing', 'delivered', 'failed')),
        CONSTRAINT delivery_events_previous_state CHECK (
            previous_state IN ('pending', 'processing', 'delivered', 'failed'))
    ) PARTITION BY RANGE (occurred_at);
    IF v_last > 0 THEN
        PERFORM setval(pg_get_serial_sequence('delivery_events', 'id'), v_last);
    END IF;
    -- What the activity figures (delivery_activity.sql) read within a partition.
    CREATE INDEX delivery_events_occurred_at_brin ON delivery_events USING brin (occurred_at);

    ALTER INDEX delivery_attempts_submission_id_idx RENAME TO delivery_attempts_initial_submission_id_idx;
    CREATE TABLE delivery_attempts (
        id              varchar(36)   NOT NULL,
        delivery_id     varchar(36)   NOT NULL,
        submission_id   varchar(36),
        attempt_number  integer       NOT NULL,
        destination_url varchar(2048) NOT NULL,
        attempted_at    timestamptz   NOT NULL,
        outcome         varchar(32)   NOT NULL,
        response_status integer,
        error           varchar(500),
        duration_ms     integer       NOT NULL DEFAULT 0,
        late            boolean       NOT NULL DEFAULT false,
        reply           varchar(500),
        CONSTRAINT delivery_attempts_id_format
            CHECK (length(id) = 36 AND id ~ '^att_[0-9a-f]+$'),
        CONSTRAINT delivery_attempts_delivery_id_fkey
            FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries (id),
        CONSTRAINT delivery_attempts_submission_id_fkey
            FOREIGN KEY (submission_id) REFERENCES submissions (id) ON DELETE SET NULL,
        CONSTRAINT delivery_attempts_number_positive CHECK (attempt_number >= 1),
        CONSTRAINT delivery_attempts_outcome_valid CHECK (outcome IN ('succeeded',
            'http_error', 'timeout', 'network_error', 'blocked_destination', 'smtp_error',
            'unsendable')),
        CONSTRAINT delivery_attempts_response_status_range
            CHECK (response_status IS NULL OR response_status BETWEEN 100 AND 599),
        CONSTRAINT delivery_attempts_duration_non_negative CHECK (duration_ms >= 0)
    ) PARTITION BY RANGE (attempted_at);
    -- A submission's deletion sets its attempts' submission_id to null through it.
    CREATE INDEX delivery_attempts_submission_id_idx ON delivery_attempts (submission_id);

    FOREACH v_table IN ARRAY ARRAY['delivery_events', 'delivery_attempts'] LOOP
        v_unit := CASE v_table WHEN 'delivery_events' THEN 'day' ELSE 'month' END;
        v_ahead := CASE v_table WHEN 'delivery_events' THEN interval '7 days'
                                ELSE interval '3 months' END;
        SELECT substring(pg_get_constraintdef(oid) FROM '''([^'']+)''')::timestamptz
        INTO v_bound
        FROM pg_constraint
        WHERE conrelid = (v_table || '_initial')::regclass
          AND conname = v_table || '_partition_bound';
        EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %I)', v_table || '_initial')
        INTO v_empty;
        IF v_empty THEN
            EXECUTE format('DROP TABLE %I', v_table || '_initial');
            PERFORM history_make_partitions(v_table::regclass, v_unit, now(), now() + v_ahead);
        ELSE
            -- The validated CHECK implies the bound, so attaching reads no row; the
            -- table's indexes match the parent's and are attached as they are, its
            -- foreign keys match the parent's and are taken over without a check.
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                           v_table, v_table || '_initial', v_bound);
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I',
                           v_table || '_initial', v_table || '_partition_bound');
            PERFORM history_make_partitions(v_table::regclass, v_unit, v_bound,
                                            greatest(v_bound, now() + v_ahead));
        END IF;
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', v_table || '_default', v_table);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id)',
                       v_table || '_default', v_table || '_default_pkey');
    END LOOP;
    ALTER TABLE delivery_attempts_default ADD CONSTRAINT
        delivery_attempts_default_delivery_number_unique UNIQUE (delivery_id, attempt_number);
END
$$;
