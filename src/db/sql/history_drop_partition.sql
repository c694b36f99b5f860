-- Drops the oldest partition of the history table $1 that lies wholly before $2 and may
-- go (not one holding an attempt of a queued delivery); answers its name, or NULL
-- (migration history_partitions: `history_drop_partition`).
SELECT history_drop_partition($1::regclass, $2) AS dropped
