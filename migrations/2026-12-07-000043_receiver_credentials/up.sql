-- How a webhook's requests prove who sends them, beyond Basic and Bearer
-- (model/receiver.rs, docs/delivery.md): OAuth2 client credentials (a kind of
-- `request_auth`, its token fetched and cached in memory by the sending process, never
-- stored), and a TLS client certificate with its key (PEM, both or neither) and an extra
-- CA the receiver's certificate may chain to (PEM). Write-only settings: the key is never
-- answered. NULL for every destination made before, which goes on as it did.
ALTER TABLE destinations
    DROP CONSTRAINT destinations_request_auth_kind,
    ADD CONSTRAINT destinations_request_auth_kind
        CHECK (request_auth IS NULL OR request_auth->>'kind' IN ('basic', 'bearer', 'oauth2')),
    ADD COLUMN client_certificate text
        CONSTRAINT destinations_client_certificate_length
        CHECK (char_length(client_certificate) BETWEEN 1 AND 65536),
    ADD COLUMN client_key text
        CONSTRAINT destinations_client_key_length
        CHECK (char_length(client_key) BETWEEN 1 AND 65536),
    ADD COLUMN client_ca text
        CONSTRAINT destinations_client_ca_length
        CHECK (char_length(client_ca) BETWEEN 1 AND 65536),
    ADD CONSTRAINT destinations_client_identity_whole
        CHECK ((client_certificate IS NULL) = (client_key IS NULL));
