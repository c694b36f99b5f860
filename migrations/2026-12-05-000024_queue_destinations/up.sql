-- The queue's deliveries (pending and processing) get their endpoint's first webhook
-- destination (migration destinations made it from the endpoint's webhook); delivered
-- and failed history keeps NULL, read as that destination. In a migration of its own: it
-- takes row locks only, where in migration destinations it held that migration's
-- exclusive lock on the table. Until it runs, and for any delivery a process of the
-- previous release writes meanwhile, the claim gives a delivery without a destination
-- that same destination (claim.sql).
--
-- One statement per state, so that each reads its partial index (`state IN (...)` can
-- use neither), with fresh statistics for the join.
ANALYZE destinations;
UPDATE webhook_deliveries d
SET destination_id = ds.id
FROM destinations ds
WHERE d.state = 'pending' AND d.destination_id IS NULL
  AND ds.endpoint_id = d.endpoint_id AND ds.position = 1;
UPDATE webhook_deliveries d
SET destination_id = ds.id
FROM destinations ds
WHERE d.state = 'processing' AND d.destination_id IS NULL
  AND ds.endpoint_id = d.endpoint_id AND ds.position = 1;
