-- How a webhook receiver is called beyond its URL and HMAC signature (model/receiver.rs):
-- the body's format (this service's JSON or a chat platform's message) or its own body
-- template (model/template.rs), its own static headers, its authentication, an Ed25519 signing key (Standard Webhooks
-- `v1a`, beside the HMAC `v1`), and a destination's own retry schedule. Each
-- is NULL or empty for the destinations made before, which go on as they did. The
-- destinations table holds a few rows per endpoint: the checks are validated at once.
ALTER TABLE destinations
    ADD COLUMN body_format varchar(16) NOT NULL DEFAULT 'standard'
        CONSTRAINT destinations_body_format_valid
        CHECK (body_format IN ('standard', 'slack', 'discord', 'teams', 'mattermost', 'google_chat')),
    ADD COLUMN body_template text
        CONSTRAINT destinations_body_template_length
        CHECK (char_length(body_template) BETWEEN 1 AND 20000),
    ADD CONSTRAINT destinations_template_or_chat
        CHECK (body_template IS NULL OR body_format = 'standard'),
    -- An email destination's own subject and text templates: {"subject", "text"}.
    ADD COLUMN email_template jsonb
        CONSTRAINT destinations_email_template_for_email
        CHECK (email_template IS NULL OR kind = 'email'),
    ADD COLUMN request_headers jsonb NOT NULL DEFAULT '[]'
        CONSTRAINT destinations_request_headers_list
        CHECK (jsonb_typeof(request_headers) = 'array' AND jsonb_array_length(request_headers) <= 20),
    ADD COLUMN request_auth jsonb
        CONSTRAINT destinations_request_auth_kind
        CHECK (request_auth IS NULL OR request_auth->>'kind' IN ('basic', 'bearer')),
    ADD COLUMN ed25519_key varchar(49)
        CONSTRAINT destinations_ed25519_key_format
        CHECK (ed25519_key ~ '^whsk_[A-Za-z0-9+/]{43}=$'),
    -- {"max_attempts", "first_wait_ms", "max_wait_ms"}: one document, so the table stays
    -- within the 32 columns its Rust mapping takes.
    ADD COLUMN retry_policy jsonb
        CONSTRAINT destinations_retry_policy_valid CHECK (
            retry_policy IS NULL
            OR ((retry_policy->>'max_attempts')::integer BETWEEN 1 AND 1000
                AND (retry_policy->>'first_wait_ms')::bigint >= 1
                AND (retry_policy->>'max_wait_ms')::bigint
                    >= (retry_policy->>'first_wait_ms')::bigint));
