DROP TABLE delivery_event_retention;
DROP TABLE delivery_events;
