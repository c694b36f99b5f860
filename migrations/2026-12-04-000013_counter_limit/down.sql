ALTER TABLE rate_limit_counters DROP COLUMN attempt_limit;
