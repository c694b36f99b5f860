-- The snapshot a feed read sees, and, read just after it, the transactions running in
-- other databases or under another application name than this service's ($1).
-- Transaction ids are cluster-wide, so a long transaction anywhere in the cluster shows in
-- every snapshot; only this service's connections to this database write delivery events,
-- and only their transactions can hold back an event id. A transaction that ended in
-- between is not listed, and is waited for like any other (it has ended, so the next read
-- lets it go).
SELECT pg_current_snapshot()::text AS snapshot,
       coalesce((SELECT array_agg(a.backend_xid::text::bigint)
                 FROM pg_stat_activity a
                 WHERE a.backend_xid IS NOT NULL
                   AND (a.datname IS DISTINCT FROM current_database()
                        OR a.application_name IS DISTINCT FROM $1)),
                '{}') AS foreign_xids
