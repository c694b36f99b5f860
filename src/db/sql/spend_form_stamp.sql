-- Spends the form stamp whose digest is $1, remembered until $2 (when it is too old to be
-- accepted anyway). One row affected: this submission spent it; none: it was spent before.
INSERT INTO form_stamps_spent (stamp_digest, expires_at)
VALUES ($1, $2)
ON CONFLICT (stamp_digest) DO NOTHING
