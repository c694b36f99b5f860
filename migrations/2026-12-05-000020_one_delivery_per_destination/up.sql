-- The unique index of submission_destination_unique serves lookups by submission too;
-- the one-delivery-per-submission constraint it replaces goes. Dropping it takes an
-- exclusive lock for a moment, and this migration does nothing else: anything after it
-- in the same transaction would hold that lock (validate_attempt_outcomes is apart).
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_submission_id_unique;
