-- Run when a pooled connection opens. The server's WAL timeline (NULL on a standby, which
-- writes nothing), and whether this connection is the first of the service on it: then
-- (a failover happened) the event id sequences are moved on by the margin $1, past every
-- id the previous timeline can have handed out, so no id is handed out twice and no
-- subscriber skips an event written after the failover. The row of event_timelines makes
-- that happen once per timeline: a second connection meanwhile waits on its key until
-- the first has committed, so every connection opened on the timeline writes only after
-- the move.
-- $1: bigint, the margin
WITH current AS (
    SELECT CASE WHEN pg_is_in_recovery() THEN NULL
           ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
           END AS timeline
), entered AS (
    INSERT INTO event_timelines (timeline)
    SELECT timeline FROM current WHERE timeline IS NOT NULL
    ON CONFLICT (timeline) DO NOTHING
    RETURNING timeline
), moved AS (
    SELECT setval(pg_get_serial_sequence('delivery_events', 'id'),
                  nextval(pg_get_serial_sequence('delivery_events', 'id')) + $1) AS delivery,
           setval(pg_get_serial_sequence('endpoint_events', 'id'),
                  nextval(pg_get_serial_sequence('endpoint_events', 'id')) + $1) AS endpoint
    FROM entered
)
SELECT (SELECT timeline FROM current) AS timeline,
       EXISTS (SELECT 1 FROM moved) AS moved
