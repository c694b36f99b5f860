DROP TABLE operator_alerts;
DELETE FROM endpoint_events WHERE kind = 'failing';
ALTER TABLE endpoint_events DROP CONSTRAINT endpoint_events_kind;
ALTER TABLE endpoint_events ADD CONSTRAINT endpoint_events_kind
    CHECK (kind IN ('paused', 'resumed', 'deleted'));
