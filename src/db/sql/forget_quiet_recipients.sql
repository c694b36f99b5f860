-- Up to $2 autoresponder recipients whose quiet time ended before $1.
DELETE FROM autoresponder_recipients
WHERE (destination_id, address_digest) IN (
    SELECT destination_id, address_digest FROM autoresponder_recipients
    WHERE quiet_until < $1
    ORDER BY quiet_until
    LIMIT $2
)
