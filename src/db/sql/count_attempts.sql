-- Counts a batch of intake requests against their fixed-window limits in one statement:
-- each against its per-source counter, and those within the per-source limit against
-- their per-endpoint counter (the order of the checks, docs/intake.md). Answers, for
-- every request in batch order, its count on each counter including itself (NULL where it
-- was not counted there).
--
-- The batch's requests to one counter are added up first (ON CONFLICT DO UPDATE may touch
-- a row only once per statement) and take that counter's last counts in batch order, so
-- limits stay exact across batches and processes. Rows are locked in sorted order, the
-- per-source ones before any per-endpoint one, so two batches never wait on each other's
-- counters in a cycle. The table is unlogged: this statement's commit waits for no flush.
--
-- $1 per-source subjects, $2 their window starts, $3 their limits, $4 per-endpoint
-- subjects, $5 their window starts: one element per request (NULL where not counted in
-- that scope); $6 and $7 the limiters' names (per source, per endpoint).
WITH request AS (
    SELECT *
    FROM unnest($1::varchar[], $2::timestamptz[], $3::integer[], $4::varchar[],
                $5::timestamptz[])
         WITH ORDINALITY AS r (source, source_window, source_limit, endpoint,
                               endpoint_window, position)
), source_counter AS (
    INSERT INTO rate_limit_counters AS counter (limiter, subject, window_start, attempts)
    SELECT $6, r.source, r.source_window, count(*)
    FROM request r
    WHERE r.source IS NOT NULL
    GROUP BY r.source, r.source_window
    ORDER BY r.source, r.source_window
    ON CONFLICT (limiter, subject, window_start)
        DO UPDATE SET attempts = counter.attempts + excluded.attempts
    RETURNING counter.subject, counter.window_start, counter.attempts
), source_count AS (
    SELECT r.position,
           c.attempts - count(*) OVER counter
               + row_number() OVER (counter ORDER BY r.position) AS count
    FROM request r
    JOIN source_counter c ON c.subject = r.source AND c.window_start = r.source_window
    WINDOW counter AS (PARTITION BY r.source, r.source_window)
), within_source AS MATERIALIZED (
    SELECT r.position, r.endpoint, r.endpoint_window
    FROM request r
    LEFT JOIN source_count s ON s.position = r.position
    WHERE r.endpoint IS NOT NULL AND (s.count IS NULL OR s.count <= r.source_limit)
), endpoint_counter AS (
    INSERT INTO rate_limit_counters AS counter (limiter, subject, window_start, attempts)
    SELECT $7, w.endpoint, w.endpoint_window, count(*)
    FROM within_source w
    GROUP BY w.endpoint, w.endpoint_window
    ORDER BY w.endpoint, w.endpoint_window
    ON CONFLICT (limiter, subject, window_start)
        DO UPDATE SET attempts = counter.attempts + excluded.attempts
    RETURNING counter.subject, counter.window_start, counter.attempts
), endpoint_count AS (
    SELECT w.position,
           c.attempts - count(*) OVER counter
               + row_number() OVER (counter ORDER BY w.position) AS count
    FROM within_source w
    JOIN endpoint_counter c ON c.subject = w.endpoint AND c.window_start = w.endpoint_window
    WINDOW counter AS (PARTITION BY w.endpoint, w.endpoint_window)
)
SELECT r.position, s.count AS source_count, e.count AS endpoint_count
FROM request r
LEFT JOIN source_count s ON s.position = r.position
LEFT JOIN endpoint_count e ON e.position = r.position
ORDER BY r.position
