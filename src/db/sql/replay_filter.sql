-- The failed deliveries a bulk replay takes, each with its destination: the start that
-- replay_matching.sql (the replay) and replayable_count.sql (its dry run) go on from.
-- Never one whose submission was erased. History recorded before destinations names none
-- and is its endpoint's upgraded webhook's (see replay_one.sql).
--
-- $1 endpoint id (NULL: every endpoint), $2 failed after, $3 failed before, $4 created
-- after, $5 created before (exclusive, NULL: unbounded), $6 retarget (what the next part
-- checks), $7 destination id (NULL: every destination).
WITH matching AS (
    SELECT d.id, t.destination_id
    FROM webhook_deliveries d
    CROSS JOIN LATERAL (
        SELECT coalesce(d.destination_id,
                        (SELECT ds.id FROM destinations ds
                         WHERE ds.endpoint_id = d.endpoint_id AND ds.position = 1
                           AND ds.kind = 'webhook' AND ds.created_at <= d.created_at))
                   AS destination_id
    ) t
    WHERE d.state = 'failed' AND d.submission_id IS NOT NULL
      AND ($1::varchar IS NULL OR d.endpoint_id = $1)
      AND ($2::timestamptz IS NULL OR d.completed_at > $2)
      AND ($3::timestamptz IS NULL OR d.completed_at < $3)
      AND ($4::timestamptz IS NULL OR d.created_at > $4)
      AND ($5::timestamptz IS NULL OR d.created_at < $5)
      AND ($7::varchar IS NULL OR d.destination_id = $7
           OR (d.destination_id IS NULL AND t.destination_id = $7))
)
