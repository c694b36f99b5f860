-- The failed deliveries a bulk replay takes, each with its destination (then
-- replay_requeue.sql, or replayable_count.sql for its dry run). Never one whose submission
-- was erased.
--
-- $3 endpoint id (NULL: every endpoint), $4 failed after, $5 failed before, $6 created
-- after, $7 created before (exclusive, NULL: unbounded), $8 destination id (NULL: every
-- destination), $9 project id (NULL: every project).
WITH matching AS (
    SELECT d.id, d.destination_id
    FROM webhook_deliveries d
    WHERE d.state = 'failed' AND d.submission_id IS NOT NULL
      AND ($3::varchar IS NULL OR d.endpoint_id = $3)
      AND ($4::timestamptz IS NULL OR d.completed_at > $4)
      AND ($5::timestamptz IS NULL OR d.completed_at < $5)
      AND ($6::timestamptz IS NULL OR d.created_at > $6)
      AND ($7::timestamptz IS NULL OR d.created_at < $7)
      AND ($8::varchar IS NULL OR d.destination_id = $8)
      AND ($9::varchar IS NULL OR d.endpoint_id IN (SELECT id FROM endpoints WHERE project_id = $9))
)
