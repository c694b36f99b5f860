-- (after replay_filter.sql) How many of the matching deliveries replay_requeue.sql would
-- take now: those whose endpoint is not deleted and, retargeted ($1), whose destination is
-- not removed. Changes nothing and locks nothing. ($2, the replay's clock, is not read.)
SELECT count(*)
FROM matching m
WHERE EXISTS (SELECT 1 FROM destinations ds
              JOIN endpoints e ON e.id = ds.endpoint_id
              WHERE ds.id = m.destination_id AND e.deleted_at IS NULL
                AND (NOT $1::boolean OR ds.removed_at IS NULL))
