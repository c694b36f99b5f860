ALTER TABLE submissions DROP COLUMN trace_parent;
