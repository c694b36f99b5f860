-- How long until something may become claimable that is not claimable now: the earliest
-- future due time of a pending delivery or end of a lease, as an interval from now by the
-- database's clock (or $1); NULL when there is none. Both read the claiming indexes (a
-- range scan's first entry). What is due already and was not claimed waits for something
-- else: it belongs to an endpoint at its cap (a freed slot wakes the worker), to another
-- worker's claim, or to a paused endpoint (a resume wakes the workers); the poll interval
-- bounds the wait in every case.
SELECT least(
           (SELECT min(next_attempt_at) FROM webhook_deliveries
            WHERE state = 'pending' AND next_attempt_at > coalesce($1, statement_timestamp())),
           (SELECT min(claim_expires_at) FROM webhook_deliveries
            WHERE state = 'processing' AND claim_expires_at > coalesce($1, statement_timestamp())))
       - coalesce($1, statement_timestamp()) AS wait
