-- Each destination's run of deliveries that ended `failed` with none delivered in
-- between, after a batch of attempts was recorded (src/delivery/recorder.rs). One element
-- per destination: $1 its id, $2 whether the batch delivered one of its deliveries while
-- its run may be nonzero (the run starts again), $3 how many of its deliveries ended
-- failed (after that delivered one); $4 the pause threshold and $5 the warning threshold
-- (0: never). Only rows whose count changes are written. Answers, of the destinations
-- not paused (nor removed), with their endpoints, those whose run reached the pause
-- threshold (`pause`) and those whose run crossed the warning threshold with this batch
-- without reaching the pause threshold (`warn`: once per run, however many batches
-- follow).
WITH input AS (
    SELECT *
    FROM unnest($1::varchar[], $2::boolean[], $3::integer[])
         AS i (destination_id, restarted, failed)
), locked AS MATERIALIZED (
    -- Rows locked in id order, so two writers never wait on each other in a cycle.
    SELECT ds.id, ds.consecutive_failed_deliveries AS before FROM destinations ds
    JOIN input i ON i.destination_id = ds.id
    WHERE i.failed > 0 OR (i.restarted AND ds.consecutive_failed_deliveries <> 0)
    ORDER BY ds.id
    FOR NO KEY UPDATE OF ds
), counted AS (
    UPDATE destinations ds
    SET consecutive_failed_deliveries = CASE
            WHEN i.restarted THEN i.failed
            ELSE ds.consecutive_failed_deliveries + i.failed END
    FROM input i, locked l
    WHERE ds.id = i.destination_id AND ds.id = l.id
    RETURNING ds.id, ds.endpoint_id, l.before, i.restarted,
              ds.consecutive_failed_deliveries AS after, ds.paused_at, ds.removed_at
)
SELECT id, endpoint_id, CASE WHEN $4 > 0 AND after >= $4 THEN 'pause' ELSE 'warn' END AS step
FROM counted
WHERE paused_at IS NULL AND removed_at IS NULL
  AND (($4 > 0 AND after >= $4)
       OR ($5 > 0 AND after >= $5 AND (restarted OR before < $5)))
