-- One feed read (after feed_snapshot.sql): the first $3 events after id $2, each with its
-- delivery as it is now, in id order, under the snapshot they were read under. Every row
-- carries the snapshot; with no event there is one row, its event columns NULL. The
-- event columns (`e.*`, as the subquery lists them) are EventRow's, in its order
-- (db/models.rs).
SELECT seen.snapshot, seen.foreign_xids, seen.own_xids, e.*
FROM seen
LEFT JOIN LATERAL (
    -- A delivery is deleted only with its events (when its endpoint is erased).
    SELECT ev.id, ev.delivery_id, ev.endpoint_id, ev.kind, ev.state, ev.previous_state,
           ev.attempts, ev.cycle_attempts, ev.outcome, ev.occurred_at,
           d.id AS d_id, d.submission_id AS d_submission_id, d.endpoint_id AS d_endpoint_id,
           d.destination_id AS d_destination_id, d.destination_url AS d_destination_url,
           d.state AS d_state,
           d.attempts AS d_attempts, d.cycle_attempts AS d_cycle_attempts,
           d.next_attempt_at AS d_next_attempt_at, d.claim_expires_at AS d_claim_expires_at,
           d.created_at AS d_created_at, d.completed_at AS d_completed_at
    FROM delivery_events ev
    -- Each event's delivery by its primary key, whatever the planner estimates: a
    -- subquery with a LIMIT is not flattened into a join, and one that refers to `ev`
    -- can only run once per event. As a plain join, the estimates decided, and they are
    -- poor here: the partitions made ahead (and the DEFAULT one) are empty and never
    -- analysed, so the planner counts about 47 rows in each, some 380 in all for the 100
    -- or so a read finds. With the queue in the tens of thousands it then hashed all of
    -- `webhook_deliveries` for every read, or ran the join in two parallel workers, which
    -- the postmaster forks for each read: 15-60 ms a read under intake, against 0.3-0.7 ms
    -- this way (docs/BENCHMARKS.md, "Subscriptions"). The LIMIT stays after the join: the
    -- first $3 events that have their delivery, as before.
    JOIN LATERAL (
        SELECT id, submission_id, endpoint_id, destination_id, destination_url, state,
               attempts, cycle_attempts, next_attempt_at, claim_expires_at, created_at,
               completed_at
        FROM webhook_deliveries
        WHERE id = ev.delivery_id
        LIMIT 1
    ) AS d ON true
    WHERE ev.id > $2
    ORDER BY ev.id
    LIMIT $3
) AS e ON true
ORDER BY e.id
