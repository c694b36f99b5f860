-- Checks the rows that were there before spam_folder (they all hold it: the column's default
-- is empty), under a lock that lets reads and writes go on.
ALTER TABLE submissions VALIDATE CONSTRAINT submissions_spam_reasons_bounded;
