-- Up to $2 spent form stamps too old to be accepted before $1: forgetting them lets none
-- be spent again.
DELETE FROM form_stamps_spent
WHERE stamp_digest IN (
    SELECT stamp_digest FROM form_stamps_spent
    WHERE expires_at < $1
    ORDER BY expires_at
    LIMIT $2
)
