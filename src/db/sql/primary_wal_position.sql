-- The primary's position in its write-ahead log, in bytes from its start, and the
-- cluster's identity (a standby of it has the same). The insert position, not the written
-- one: with synchronous_commit off a commit is visible once its record is inserted, before
-- it is written, and a standby that has replayed through this position has every commit
-- the primary's readers could see when it was taken.
SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS position,
       (SELECT system_identifier FROM pg_control_system())::text AS cluster
