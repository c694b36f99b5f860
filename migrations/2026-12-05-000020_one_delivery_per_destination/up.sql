-- The unique index of submission_destination_unique serves lookups by submission too;
-- the one-delivery-per-submission constraint it replaces goes (dropping it takes a lock
-- for a moment only).
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_submission_id_unique;

-- The attempt outcomes of email (migration destinations added the rule NOT VALID):
-- validating scans the attempt history under a lock that lets reads and writes go on.
ALTER TABLE delivery_attempts VALIDATE CONSTRAINT delivery_attempts_outcome_valid;
