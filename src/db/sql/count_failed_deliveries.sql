-- Each endpoint's run of deliveries that ended `failed` with none delivered in between,
-- after a batch of attempts was recorded (src/delivery/recorder.rs). One element per
-- endpoint: $1 its id, $2 whether the batch delivered one of its deliveries while its
-- run may be nonzero (the run starts again), $3 how many of its deliveries ended failed
-- (after that delivered one); $4 the threshold (0: never). Only rows whose count changes
-- are written. Answers the endpoints not paused (nor deleted) whose run reached it.
WITH input AS (
    SELECT *
    FROM unnest($1::varchar[], $2::boolean[], $3::integer[]) AS i (endpoint_id, restarted, failed)
), locked AS MATERIALIZED (
    -- Rows locked in id order, so two writers never wait on each other in a cycle.
    SELECT e.id FROM endpoints e
    JOIN input i ON i.endpoint_id = e.id
    WHERE i.failed > 0 OR (i.restarted AND e.consecutive_failed_deliveries <> 0)
    ORDER BY e.id
    FOR NO KEY UPDATE OF e
), counted AS (
    UPDATE endpoints e
    SET consecutive_failed_deliveries = CASE
            WHEN i.restarted THEN i.failed
            ELSE e.consecutive_failed_deliveries + i.failed END
    FROM input i
    WHERE e.id = i.endpoint_id AND e.id IN (SELECT id FROM locked)
    RETURNING e.id, e.consecutive_failed_deliveries, e.paused_at, e.deleted_at
)
SELECT id FROM counted
WHERE $4 > 0 AND consecutive_failed_deliveries >= $4
  AND paused_at IS NULL AND deleted_at IS NULL
