-- How long until something may become claimable: the earliest due time of a pending
-- delivery or end of a lease, as an interval from now by the database's clock (or $1).
-- Negative when something is due already; NULL when nothing is queued. Both read the
-- claiming indexes.
SELECT least(
           (SELECT min(next_attempt_at) FROM webhook_deliveries WHERE state = 'pending'),
           (SELECT min(claim_expires_at) FROM webhook_deliveries WHERE state = 'processing'))
       - coalesce($1, statement_timestamp()) AS wait
