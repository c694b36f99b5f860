DROP TRIGGER webhook_deliveries_record_event_updates ON webhook_deliveries;
DROP TRIGGER webhook_deliveries_record_event_inserts ON webhook_deliveries;
DROP FUNCTION record_delivery_event();
DROP TABLE delivery_event_retention;
DROP TABLE delivery_events;
