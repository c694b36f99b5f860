-- The destinations written by the backfill are the ones every reader read before it:
-- nothing to undo.
SELECT 1;
