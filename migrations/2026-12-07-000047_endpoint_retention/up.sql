-- An endpoint's own retention: how many days its submissions are kept, in the inbox and
-- in the spam folder; NULL: the server's (FORMS_SUBMISSION_RETENTION_DAYS,
-- FORMS_SPAM_RETENTION_DAYS); 0: kept for ever. The hourly retention pass reads them
-- (retention_delete.sql). Columns without a default: adding them rewrites nothing.
ALTER TABLE endpoints
    ADD COLUMN retention_days integer
        CONSTRAINT endpoints_retention_days_range CHECK (retention_days BETWEEN 0 AND 1000000),
    ADD COLUMN spam_retention_days integer
        CONSTRAINT endpoints_spam_retention_days_range CHECK (spam_retention_days BETWEEN 0 AND 1000000);
