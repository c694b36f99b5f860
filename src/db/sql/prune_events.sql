-- Deletes up to $2 of the oldest events, stopping at the first that occurred at or after
-- the cutoff $1, and moves the pruning mark to the highest id removed, in one statement.
-- Everything at or below the mark is gone and nothing above it is, so a subscriber that
-- resumes from below the mark is told its history expired instead of getting a gap.
-- Nothing is deleted when the oldest event is still within retention.
WITH oldest AS MATERIALIZED (
    SELECT id, occurred_at FROM delivery_events ORDER BY id LIMIT $2
), first_kept AS MATERIALIZED (
    SELECT min(id) AS id FROM oldest WHERE occurred_at >= $1
), bound AS MATERIALIZED (
    SELECT max(o.id) AS id
    FROM oldest o
    WHERE o.id < coalesce((SELECT f.id FROM first_kept f), 9223372036854775807)
), gone AS (
    DELETE FROM delivery_events WHERE id <= (SELECT b.id FROM bound b) RETURNING 1
), marked AS (
    UPDATE delivery_event_retention
    SET pruned_through = greatest(pruned_through, (SELECT b.id FROM bound b))
    WHERE (SELECT b.id FROM bound b) IS NOT NULL
    RETURNING 1
)
SELECT count(*) AS pruned FROM gone
