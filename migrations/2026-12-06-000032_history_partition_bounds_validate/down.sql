-- Nothing to undo: a validated constraint is the same rule as a NOT VALID one for rows to
-- come; history_partition_bounds' down drops it.
SELECT 1;
