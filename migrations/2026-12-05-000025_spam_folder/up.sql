-- The spam folder, captcha and spam rules (docs/intake.md, "Spam").
--
-- A submission judged spam (by its captcha's score, a rule or Akismet) is stored with
-- `spam` set and the reasons, and gets no delivery. Marking it "not spam" clears `spam`
-- and queues its deliveries in the same transaction; `spam_reviewed_at` is when an
-- operator last decided. Adding columns with constant defaults rewrites nothing (a
-- catalog change under a moment's exclusive lock); the CHECK is added NOT VALID (no
-- scan under that lock) and validated by spam_folder_validate.
ALTER TABLE submissions
    ADD COLUMN spam boolean NOT NULL DEFAULT false,
    ADD COLUMN spam_reasons text[] NOT NULL DEFAULT '{}',
    ADD COLUMN spam_reviewed_at timestamptz,
    ADD CONSTRAINT submissions_spam_reasons_bounded
        CHECK (cardinality(spam_reasons) <= 16) NOT VALID;

-- An endpoint's protection against spam: at most one row per endpoint, absent when it
-- has none. Read by intake with the endpoint (the endpoint cache), changed only by
-- setSpamProtection.
CREATE TABLE endpoint_spam_protection (
    endpoint_id varchar(64) PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    captcha_provider varchar(16),
    -- The provider's secret key: written, never shown again.
    captcha_secret varchar(200),
    -- reCAPTCHA v3 only: a score under this is spam.
    captcha_min_score real,
    -- What a submission gets when a verifier (captcha or Akismet) cannot be reached:
    -- refused (503, nothing stored) or kept in the spam folder.
    when_unreachable varchar(8) NOT NULL DEFAULT 'refuse',
    max_links integer,
    blocked_words text[] NOT NULL DEFAULT '{}',
    blocked_patterns text[] NOT NULL DEFAULT '{}',
    blocked_senders text[] NOT NULL DEFAULT '{}',
    min_fill_seconds integer,
    akismet boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL,
    CONSTRAINT endpoint_spam_protection_provider_valid CHECK (
        captcha_provider IN ('turnstile', 'hcaptcha', 'recaptcha_v2', 'recaptcha_v3')),
    CONSTRAINT endpoint_spam_protection_captcha_whole CHECK (
        (captcha_provider IS NULL) = (captcha_secret IS NULL)),
    CONSTRAINT endpoint_spam_protection_score_only_v3 CHECK (
        (captcha_provider = 'recaptcha_v3') = (captcha_min_score IS NOT NULL)
        OR (captcha_provider IS NULL AND captcha_min_score IS NULL)),
    CONSTRAINT endpoint_spam_protection_score_range CHECK (
        captcha_min_score IS NULL OR (captcha_min_score >= 0 AND captcha_min_score <= 1)),
    CONSTRAINT endpoint_spam_protection_when_unreachable_valid CHECK (
        when_unreachable IN ('refuse', 'spam')),
    CONSTRAINT endpoint_spam_protection_max_links_valid CHECK (
        max_links IS NULL OR max_links >= 0),
    CONSTRAINT endpoint_spam_protection_min_fill_valid CHECK (
        min_fill_seconds IS NULL OR (min_fill_seconds >= 1 AND min_fill_seconds <= 3600)),
    CONSTRAINT endpoint_spam_protection_lists_bounded CHECK (
        cardinality(blocked_words) <= 200 AND cardinality(blocked_patterns) <= 50
        AND cardinality(blocked_senders) <= 200)
);

-- Captcha tokens already presented (their SHA-256), so that one is never accepted twice
-- even by a provider that would: the first submission to insert it wins. Pruned hourly
-- once older than any provider lets a token live.
CREATE TABLE captcha_tokens_seen (
    token_digest varchar(64) PRIMARY KEY,
    seen_at timestamptz NOT NULL
);
CREATE INDEX captcha_tokens_seen_seen_at_idx ON captcha_tokens_seen (seen_at);


-- Where a delivery to a destination goes, as the delivery keeps it (its snapshot): a
-- webhook's URL, a `mailto:` of an email destination's recipients, and for an
-- autoresponder the field that names the address (the snapshot never holds the
-- address: erasing the submission leaves none of it behind). One definition for every
-- statement that queues or retargets a delivery; PostgreSQL inlines it.
CREATE FUNCTION destination_snapshot_url(kind varchar, url varchar, recipients text[],
                                         reply_to_field varchar)
RETURNS varchar LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE kind
               WHEN 'email' THEN 'mailto:' || array_to_string(recipients, ',')
               WHEN 'autoresponder' THEN 'autoresponder:' || reply_to_field
               ELSE url END
$$;

-- The one plain address a submission's field holds, trimmed, or NULL: the field is one
-- value, at most 254 characters, a plain `local@domain` (what an autoresponder answers,
-- and what the worker checks again: email.rs `submitter_address`). One definition for the
-- statements that queue an autoresponder's confirmation; one expression, so PostgreSQL
-- inlines it.
CREATE FUNCTION submitted_address(fields json, field varchar)
RETURNS varchar LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN json_typeof(fields -> field) = 'array'
             AND json_array_length(fields -> field) = 1
             AND length(btrim(fields -> field ->> 0, ' ')) <= 254
             AND btrim(fields -> field ->> 0, ' ')
                 ~ '^[A-Za-z0-9.!#$%&''*+/=?^_`{|}~-]+@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$'
        THEN btrim(fields -> field ->> 0, ' ')
    END
$$;
