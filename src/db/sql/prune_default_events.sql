-- Deletes up to $2 of the events the DEFAULT partition caught (a time outside every
-- partition: partitions not made in time) that occurred before $1, and moves the pruning
-- mark past the highest id removed, in one statement, so that a subscriber resuming from
-- below it is told its history expired. Normally the partition is empty and this reads
-- nothing.
WITH gone AS (
    DELETE FROM delivery_events_default
    WHERE id IN (SELECT id FROM delivery_events_default WHERE occurred_at < $1
                 ORDER BY id LIMIT $2)
    RETURNING id
), marked AS (
    UPDATE delivery_event_retention
    SET pruned_through = greatest(pruned_through, (SELECT max(g.id) FROM gone g))
    WHERE EXISTS (SELECT 1 FROM gone)
    RETURNING 1
)
SELECT count(*) AS pruned FROM gone
