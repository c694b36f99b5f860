-- The submissions retention takes at $1 (what retention_count.sql counts and
-- retention_delete.sql deletes): those older than their endpoint's own days
-- (endpoints.retention_days, spam_retention_days for the spam folder) or else the
-- server's, $2 for the inbox and $3 for the spam folder (0, wherever it comes from:
-- kept), that no delivery still needs (no delivery at all, or every one delivered; a
-- failed one may be replayed, a pending or processing one still reads the fields). Each
-- endpoint's are read from submissions_endpoint_received_at_id_idx up to its cutoff.
WITH candidates AS (
    SELECT s.id
    FROM endpoints e
    CROSS JOIN LATERAL (
        SELECT $1 - make_interval(days => nullif(coalesce(e.retention_days, $2), 0)) AS inbox,
               $1 - make_interval(days => nullif(coalesce(e.spam_retention_days, $3), 0)) AS spam
    ) cutoff
    JOIN submissions s ON s.endpoint_id = e.id
    WHERE s.received_at < greatest(cutoff.inbox, cutoff.spam)
      AND ((NOT s.spam AND s.received_at < cutoff.inbox) OR (s.spam AND s.received_at < cutoff.spam))
      AND NOT EXISTS (
          SELECT 1 FROM webhook_deliveries d
          WHERE d.submission_id = s.id AND d.state <> 'delivered'
      )
)
