-- The attempt outcomes of email (migration destinations added the rule NOT VALID):
-- validating scans the whole attempt history, under a lock (SHARE UPDATE EXCLUSIVE) that
-- lets reads and writes go on, in a transaction of its own so that no stronger lock is
-- held meanwhile.
ALTER TABLE delivery_attempts VALIDATE CONSTRAINT delivery_attempts_outcome_valid;
