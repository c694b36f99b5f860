DROP FUNCTION submitted_address(json, varchar);
DROP FUNCTION destination_snapshot_url(varchar, varchar, text[], varchar);
DROP TABLE captcha_tokens_seen;
DROP TABLE endpoint_spam_protection;
ALTER TABLE submissions
    DROP CONSTRAINT submissions_spam_reasons_bounded,
    DROP COLUMN spam_reviewed_at,
    DROP COLUMN spam_reasons,
    DROP COLUMN spam;
