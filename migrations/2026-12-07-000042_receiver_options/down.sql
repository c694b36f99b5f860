ALTER TABLE destinations
    DROP COLUMN body_format,
    DROP COLUMN body_template,
    DROP COLUMN email_template,
    DROP COLUMN request_headers,
    DROP COLUMN request_auth,
    DROP COLUMN ed25519_key,
    DROP COLUMN retry_policy;
