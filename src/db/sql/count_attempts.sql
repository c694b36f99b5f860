-- Counts a batch of intake requests against their fixed-window limits in one statement:
-- each against its per-source counter, and those within the per-source limit against
-- their per-endpoint counter (the order of the checks, docs/intake.md). Answers every
-- counter it added to, with its count after the batch (per_endpoint says which scope).
--
-- The batch's requests to one counter are added up first (ON CONFLICT DO UPDATE may touch
-- a row only once per statement); the caller gives each request the number of later
-- requests of the batch on the same per-source counter, so that the request's own count
-- is the counter's new value less those, and derives the per-endpoint counts the same
-- way (rate_limits::count_attempts): limits stay exact across batches and processes. Rows
-- are locked in sorted order (by the subject's bytes, the `C` collation, which is the
-- order the outbox statement's counters come in from the server whatever the database's
-- collation), the per-source ones before any per-endpoint one (the
-- per-endpoint insert reads every per-source row first), so two batches never wait on
-- each other's counters in a cycle. The table is unlogged: this statement's commit waits
-- for no flush.
--
-- $1 per-source subjects, $2 their window starts, $3 their limits, $4 how many later
-- requests of the batch share the request's per-source counter, $5 per-endpoint subjects,
-- $6 their window starts: one element per request (NULL where not counted in that
-- scope); $7 and $8 the limiters' names (per source, per endpoint).
WITH request AS (
    SELECT *
    FROM unnest($1::varchar[], $2::timestamptz[], $3::integer[], $4::integer[],
                $5::varchar[], $6::timestamptz[])
         AS r (source, source_window, source_limit, source_later, endpoint, endpoint_window)
), source_counter AS (
    INSERT INTO rate_limit_counters AS counter (limiter, subject, window_start, attempts)
    SELECT $7, r.source, r.source_window, count(*)
    FROM request r
    WHERE r.source IS NOT NULL
    GROUP BY r.source, r.source_window
    ORDER BY r.source COLLATE "C", r.source_window
    ON CONFLICT (limiter, subject, window_start)
        DO UPDATE SET attempts = counter.attempts + excluded.attempts
    RETURNING counter.subject, counter.window_start, counter.attempts
), endpoint_counter AS (
    INSERT INTO rate_limit_counters AS counter (limiter, subject, window_start, attempts)
    SELECT $8, r.endpoint, r.endpoint_window, count(*)
    FROM request r
    LEFT JOIN source_counter c ON c.subject = r.source AND c.window_start = r.source_window
    WHERE r.endpoint IS NOT NULL
      AND (r.source IS NULL OR c.attempts - r.source_later <= r.source_limit)
    GROUP BY r.endpoint, r.endpoint_window
    ORDER BY r.endpoint COLLATE "C", r.endpoint_window
    ON CONFLICT (limiter, subject, window_start)
        DO UPDATE SET attempts = counter.attempts + excluded.attempts
    RETURNING counter.subject, counter.window_start, counter.attempts
)
SELECT false AS per_endpoint, subject, window_start, attempts::bigint FROM source_counter
UNION ALL
SELECT true, subject, window_start, attempts::bigint FROM endpoint_counter
