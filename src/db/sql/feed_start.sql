-- Where a feed reader starts (after feed_snapshot.sql): the highest event id, under the
-- snapshot it was read under (0 when there are none).
SELECT seen.snapshot, seen.foreign_xids, seen.own_xids,
       coalesce((SELECT max(id) FROM delivery_events), 0) AS newest
FROM seen
