-- The limit a counter is checked against, in its row.
--
-- The outbox statement adds a batch's requests to their rate-limit counters as its last
-- step and must fail should any counter end over its limit. It used to answer every
-- counter's new value (`RETURNING`), join them with its input to find each one's limit,
-- and call rate_limit_holds on every one. It now writes each counter's limit into the
-- row it proposes, so that the upsert's `DO UPDATE` sees it (as `excluded.attempt_limit`)
-- and compares the new count with it in place; rate_limit_holds is called only for a
-- counter over its limit, to raise. No answer, no join, no call per counter.
--
-- A plain nullable column, and no constraint on it: a process of the previous release,
-- which neither writes nor reads it, counts on the same rows as before while a new one
-- runs beside it (docs/operations.md), and a count past a limit recorded here is never an
-- error by itself (the counting statement, count_attempts.sql, takes counters over their
-- limits on purpose, counting refused requests too).
ALTER TABLE rate_limit_counters ADD COLUMN attempt_limit integer;

