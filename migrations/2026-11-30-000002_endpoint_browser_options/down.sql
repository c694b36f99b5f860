ALTER TABLE endpoints
    DROP CONSTRAINT endpoints_allowed_origins_no_nulls,
    DROP CONSTRAINT endpoints_honeypot_field_not_empty,
    DROP COLUMN honeypot_field,
    DROP COLUMN allowed_origins,
    DROP COLUMN redirect_url;
