-- Counting a batch's rate limits in the outbox statement itself.
--
-- outbox_insert_batch.sql adds the batch's requests to their rate-limit counters as its
-- last step, so that the counter rows are locked only for the end of the statement and
-- its commit, and checks each counter's new value with this function: over the limit, it
-- raises, the whole statement (submissions, deliveries, events, counters) rolls back, and
-- intake counts that batch again on its own, request by request in the order of the
-- checks, before writing what the limits let through (intake/committer.rs). The error
-- names a constraint that does not exist on any table, so that the caller can tell this
-- refusal from every other.
CREATE FUNCTION rate_limit_holds(p_attempts integer, p_limit integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_attempts > p_limit THEN
        RAISE EXCEPTION 'a rate limit counted in this batch is exceeded'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rate_limit_holds';
    END IF;
    RETURN true;
END
$$;
