-- Pending deliveries of one destination by due time: what the per-destination claim
-- reads. Built CONCURRENTLY, as are the three indexes after it: on a large history (10
-- million deliveries, docs/BENCHMARKS.md) a build scans the table for a long while, and a
-- plain build would hold every write to webhook_deliveries that long; a concurrent one
-- blocks none. A build that fails or is killed leaves an invalid index behind, which
-- `IF NOT EXISTS` would take for done: the migration runner drops invalid indexes before
-- it applies anything (src/db/migrations.rs), so running the migrations again rebuilds it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_pending_destination_due_idx
    ON webhook_deliveries (destination_id, next_attempt_at) WHERE state = 'pending';
