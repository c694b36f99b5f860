-- The alert endpoint event $1 owes: of kind $2, for destination $4 of endpoint $3, pause
-- reason $5, at $6 (due at once), with the destination's run of failed deliveries as it
-- is in the event's transaction.
INSERT INTO operator_alerts
    (event_id, kind, endpoint_id, destination_id, reason, failed_deliveries, occurred_at,
     next_attempt_at)
SELECT $1, $2, $3, ds.id, $5, ds.consecutive_failed_deliveries, $6, $6
FROM destinations ds
WHERE ds.id = $4
