-- The start of both feed statements (feed_start.sql, feed_read.sql follow it): the
-- snapshot the statement reads under, and, read just after it (a statement's snapshot is
-- taken before it runs): the transactions running in other databases or under another
-- application name than this service's ($1), and those running of this service's own
-- connections to this database.
--
-- Transaction ids are cluster-wide, so a long transaction anywhere in the cluster shows in
-- every snapshot; only this service's connections to this database write delivery events,
-- and only their transactions can hold back an event id. A transaction that ended in
-- between is not listed, and is waited for like any other (it has ended, so the next read
-- lets it go).
--
-- The service's own running transactions matter because a snapshot lists as running only
-- those below its `xmax` (the newest completed id + 1): one that took its id after the
-- newest one to complete runs unlisted, and may hold an event id below ones the read saw.
--
-- One statement, not a transaction of several: one snapshot for all it reads, and one
-- round trip instead of four (BEGIN, the snapshot, the events, COMMIT), each of which
-- waits for a busy machine to schedule the database's process again.
WITH seen AS MATERIALIZED (
    SELECT pg_current_snapshot()::text AS snapshot,
           coalesce((SELECT array_agg(a.backend_xid::text::bigint)
                     FROM pg_stat_activity a
                     WHERE a.backend_xid IS NOT NULL
                       AND (a.datname IS DISTINCT FROM current_database()
                            OR a.application_name IS DISTINCT FROM $1)),
                    '{}') AS foreign_xids,
           coalesce((SELECT array_agg(a.backend_xid::text::bigint)
                     FROM pg_stat_activity a
                     WHERE a.backend_xid IS NOT NULL
                       AND a.datname = current_database()
                       AND a.application_name = $1),
                    '{}') AS own_xids
)
