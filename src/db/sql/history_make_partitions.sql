-- Makes the partitions of the history table $1 (`delivery_events`, `delivery_attempts`)
-- covering [$3, $4), one per $2 ('day' or 'month'), where none exists yet; answers how
-- many (migration history_partitions: `history_make_partitions`).
SELECT history_make_partitions($1::regclass, $2, $3, $4) AS made
