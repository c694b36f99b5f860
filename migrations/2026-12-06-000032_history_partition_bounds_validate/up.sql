-- Checks the rows written before history_partition_bounds against its bounds: a scan of
-- each table under SHARE UPDATE EXCLUSIVE, which lets reads and writes go on (10 million
-- attempts: docs/BENCHMARKS.md), in a transaction of its own so that no stronger lock is
-- held meanwhile. Once validated, attaching the table as a partition needs no scan.
ALTER TABLE delivery_events VALIDATE CONSTRAINT delivery_events_partition_bound;
ALTER TABLE delivery_attempts VALIDATE CONSTRAINT delivery_attempts_partition_bound;
