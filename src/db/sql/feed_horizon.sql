-- Taken after a feed read, in a transaction of its own: a transaction id of the reader's
-- (`pg_current_xact_id()` assigns one: it is higher than that of every transaction that
-- had one when the events were read, so every transaction that can hold an event id below
-- one the read saw is below it), and the `xmax` of this statement's snapshot (taken before
-- that id was assigned). The `xmax` the same as the read's means no transaction above the
-- read's `xmax` ended in between, so the read's list of the service's running
-- transactions, taken in between, missed none that was running at the read. And the
-- primary's log position after the read (as primary_wal_position.sql counts it): every
-- event the read saw committed before it, so a read replica that has replayed through it
-- has them all (feed/mod.rs, "Catch-up on the read replica").
SELECT pg_current_xact_id()::text::bigint AS horizon,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
       (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS wal_position
