-- How long until something may become claimable that is not claimable now: the earliest
-- future due time of a pending delivery or end of a lease, or the time a throttled
-- destination with a delivery due may start its next request, as an interval from now by
-- the database's clock (or $1); NULL when there is none. The first two read the claiming
-- indexes (a range scan's first entry), the third the few throttled destinations. What is
-- due already and was not claimed waits for something else: it belongs to a destination
-- at its cap (a freed slot wakes the worker), to another worker's claim, or to a paused
-- destination (a resume wakes the workers); the poll interval bounds the wait in every
-- case.
SELECT least(
           (SELECT min(next_attempt_at) FROM webhook_deliveries
            WHERE state = 'pending' AND next_attempt_at > coalesce($1, statement_timestamp())),
           (SELECT min(claim_expires_at) FROM webhook_deliveries
            WHERE state = 'processing' AND claim_expires_at > coalesce($1, statement_timestamp())),
           (SELECT min(t.next_at - throttle_burst())
            FROM destination_throttles t
            JOIN destinations ds ON ds.id = t.destination_id
            WHERE ds.max_requests_per_second IS NOT NULL AND ds.paused_at IS NULL
              AND t.next_at - throttle_burst() > coalesce($1, statement_timestamp())
              AND EXISTS (SELECT 1 FROM webhook_deliveries w
                          WHERE w.state = 'pending' AND w.destination_id = ds.id
                            AND w.next_attempt_at <= coalesce($1, statement_timestamp()))))
       - coalesce($1, statement_timestamp()) AS wait
