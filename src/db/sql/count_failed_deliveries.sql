-- Each destination's run of deliveries that ended `failed` with none delivered in
-- between, after a batch of attempts was recorded (src/delivery/recorder.rs). One element
-- per destination: $1 its id, $2 whether the batch delivered one of its deliveries while
-- its run may be nonzero (the run starts again), $3 how many of its deliveries ended
-- failed (after that delivered one); $4 the threshold (0: never). Only rows whose count
-- changes are written. Answers the destinations not paused (nor removed) whose run
-- reached it.
WITH input AS (
    SELECT *
    FROM unnest($1::varchar[], $2::boolean[], $3::integer[])
         AS i (destination_id, restarted, failed)
), locked AS MATERIALIZED (
    -- Rows locked in id order, so two writers never wait on each other in a cycle.
    SELECT ds.id FROM destinations ds
    JOIN input i ON i.destination_id = ds.id
    WHERE i.failed > 0 OR (i.restarted AND ds.consecutive_failed_deliveries <> 0)
    ORDER BY ds.id
    FOR NO KEY UPDATE OF ds
), counted AS (
    UPDATE destinations ds
    SET consecutive_failed_deliveries = CASE
            WHEN i.restarted THEN i.failed
            ELSE ds.consecutive_failed_deliveries + i.failed END
    FROM input i
    WHERE ds.id = i.destination_id AND ds.id IN (SELECT id FROM locked)
    RETURNING ds.id, ds.consecutive_failed_deliveries, ds.paused_at, ds.removed_at
)
SELECT id FROM counted
WHERE $4 > 0 AND consecutive_failed_deliveries >= $4
  AND paused_at IS NULL AND removed_at IS NULL
