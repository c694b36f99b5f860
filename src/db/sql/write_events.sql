-- Appended to every statement that changes deliveries (`sql!(…, with_events)`): the
-- statement defines `changes`, one row per delivery it changed, and `result`, what it
-- answers. The events are written by the same statement, so in the same transaction as
-- the change; PostgreSQL delivers the notification to the event readers at commit. A
-- delivery created and claimed by one statement (claiming at intake) gets its `created`
-- event first.
, written_events AS (
    INSERT INTO delivery_events
        (delivery_id, endpoint_id, kind, state, previous_state, attempts, cycle_attempts,
         outcome, occurred_at)
    SELECT c.delivery_id, c.endpoint_id, c.kind, c.state, c.previous_state, c.attempts,
           c.cycle_attempts, c.outcome, statement_timestamp()
    FROM changes c
    ORDER BY c.delivery_id, c.kind <> 'created'
    RETURNING pg_notify('hymical_delivery_event', '')
)
SELECT * FROM result
