-- Counts a batch of requests against their fixed-window counters in one statement and
-- answers each counter's total after it: $1 limiters, $2 subjects, $3 window starts, $4
-- how many requests of the batch each counter gets. The keys are distinct (a batch's
-- requests to one counter are added up first: ON CONFLICT DO UPDATE may touch a row only
-- once per statement) and sorted, and rows are locked in that order, so two batches never
-- wait on each other's counters in a cycle.
INSERT INTO rate_limit_counters AS counter (limiter, subject, window_start, attempts)
SELECT key.limiter, key.subject, key.window_start, key.attempts
FROM unnest($1::varchar[], $2::varchar[], $3::timestamptz[], $4::integer[])
     WITH ORDINALITY AS key (limiter, subject, window_start, attempts, position)
ORDER BY key.position
ON CONFLICT (limiter, subject, window_start)
    DO UPDATE SET attempts = counter.attempts + excluded.attempts
RETURNING counter.limiter, counter.subject, counter.window_start, counter.attempts
