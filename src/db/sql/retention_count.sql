-- How many submissions retention would delete now: received before $1 (in the inbox) or
-- $2 (in the spam folder; each NULL: none), and no delivery
-- still needs them (no delivery at all, or every one delivered; a failed one may be
-- replayed, a pending or processing one still reads the fields).
SELECT count(*) AS expired
FROM submissions s
WHERE ((NOT s.spam AND s.received_at < $1) OR (s.spam AND s.received_at < $2))
  AND NOT EXISTS (
      SELECT 1 FROM webhook_deliveries d
      WHERE d.submission_id = s.id AND d.state <> 'delivered'
  )
