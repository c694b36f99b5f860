ALTER TABLE endpoints DROP COLUMN retention_days, DROP COLUMN spam_retention_days;
