-- The first step of partitioning the history by time (history_partitions, two migrations
-- on): the event log and the attempt history, as they are, become the first partition of
-- their partitioned table, holding everything before a bound. Attaching a table as a
-- partition scans it to check that bound, under a lock that stops every read and write,
-- unless a validated CHECK constraint already says as much. This migration adds that
-- CHECK, NOT VALID (a catalog change under a moment's exclusive lock: no scan), and
-- history_partition_bounds_validate validates it under a lock that lets reads and writes
-- go on.
--
-- A row written from now on must pass the CHECK, so each bound lies well ahead: events
-- are stamped with the database's clock (statement_timestamp()), so the start of the day
-- after tomorrow (UTC) leaves at least a day; attempts with the worker's clock, so the
-- start of the month after next leaves at least a month for a worker whose clock runs
-- ahead. Rows between now and the bound stay in that first partition, which retention
-- drops whole once its bound is past the horizon. A lock not granted within 10 s fails
-- the migration rather than queueing every request behind it; running it again is safe.
SET LOCAL lock_timeout = '10s';

DO $$
BEGIN
    EXECUTE format(
        'ALTER TABLE delivery_events ADD CONSTRAINT delivery_events_partition_bound '
        'CHECK (occurred_at < %L) NOT VALID',
        date_trunc('day', now(), 'UTC') + interval '2 days');
    EXECUTE format(
        'ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_partition_bound '
        'CHECK (attempted_at < %L) NOT VALID',
        date_trunc('month', now(), 'UTC') + interval '2 months');
END
$$;
