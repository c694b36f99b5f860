DROP TABLE rate_limit_counters;
DROP TABLE management_api_keys;
DROP TABLE delivery_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE submissions;
DROP TABLE endpoints;
