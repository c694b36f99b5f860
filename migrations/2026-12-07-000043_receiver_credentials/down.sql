UPDATE destinations SET request_auth = NULL WHERE request_auth->>'kind' = 'oauth2';
ALTER TABLE destinations
    DROP CONSTRAINT destinations_client_identity_whole,
    DROP COLUMN client_certificate,
    DROP COLUMN client_key,
    DROP COLUMN client_ca,
    DROP CONSTRAINT destinations_request_auth_kind,
    ADD CONSTRAINT destinations_request_auth_kind
        CHECK (request_auth IS NULL OR request_auth->>'kind' IN ('basic', 'bearer'));
