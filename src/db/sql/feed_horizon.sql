-- Taken after a feed read, in a transaction of its own: a transaction id of the reader's
-- (`pg_current_xact_id()` assigns one: it is higher than that of every transaction that
-- had one when the events were read, so every transaction that can hold an event id below
-- one the read saw is below it), and the `xmax` of this statement's snapshot (taken before
-- that id was assigned). The `xmax` the same as the read's means no transaction above the
-- read's `xmax` ended in between, so the read's list of the service's running
-- transactions, taken in between, missed none that was running at the read.
SELECT pg_current_xact_id()::text::bigint AS horizon,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax
