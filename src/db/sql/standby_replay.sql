-- Where a standby stands: whether it is one (in recovery), the position it has replayed
-- through (bytes from the log's start, as primary_wal_position.sql counts them), whether
-- its replay is paused, and the identity of the cluster it copies. The functions that ask
-- about replay fail on a server that is not in recovery, hence the CASEs.
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN pg_is_in_recovery()
            THEN (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint END AS replayed,
       CASE WHEN pg_is_in_recovery()
            THEN pg_get_wal_replay_pause_state() <> 'not paused' ELSE false END AS paused,
       (SELECT system_identifier FROM pg_control_system())::text AS cluster
