-- The one failed delivery a replay by id takes, with its destination (then
-- replay_requeue.sql). $3 delivery id.
WITH matching AS (
    SELECT d.id, d.destination_id
    FROM webhook_deliveries d
    WHERE d.id = $3 AND d.state = 'failed' AND d.submission_id IS NOT NULL
)
