-- Browser extras of public intake (docs/intake.md): where to send a browser after a
-- successful post, which origins may post, and the honeypot field that marks bots.
ALTER TABLE endpoints
    ADD COLUMN redirect_url    varchar(2048),
    ADD COLUMN allowed_origins text[]       NOT NULL DEFAULT '{}',
    ADD COLUMN honeypot_field  varchar(128),
    ADD CONSTRAINT endpoints_honeypot_field_not_empty
        CHECK (honeypot_field IS NULL OR honeypot_field <> ''),
    ADD CONSTRAINT endpoints_allowed_origins_no_nulls
        CHECK (array_position(allowed_origins, NULL) IS NULL);
