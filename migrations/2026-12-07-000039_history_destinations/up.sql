-- Every delivery names its destination. Deliveries written before destinations
-- (migration destinations) kept a NULL `destination_id`: the queue was given its
-- endpoint's webhook destination by queue_destinations, and the delivered and failed
-- history was read as the destination the upgrade made from its endpoint's webhook
-- (position 1, a webhook, created no later than the delivery), by every reader that
-- looked at it. Here that reading is written down once, so no reader needs it again.
-- A delivery with no such destination (its endpoint deleted before destinations, or one
-- that never had a webhook) keeps NULL: it has no destination to name, and none is made up.
-- One in the queue left by a process of the release before destinations still running
-- during the upgrade takes its endpoint's first webhook that is not removed, as the claim
-- of that time gave it.
--
-- Safe on a large history: it walks the deliveries in primary-key order, 10,000 at a
-- time, and commits after each batch, so it holds no lock beyond the rows of one batch
-- for the moment that batch takes (measured on 10 million deliveries:
-- docs/BENCHMARKS.md, "Backfilling destinations"). Stopped half way, it is run again
-- from the start and skips what is done. It changes no state, so the delivery counts'
-- trigger has nothing to count.
DO $$
DECLARE
    v_after varchar := '';
    v_last  varchar;
BEGIN
    LOOP
        SELECT max(b.id) INTO v_last
        FROM (SELECT w.id FROM webhook_deliveries w
              WHERE w.id > v_after ORDER BY w.id LIMIT 10000) b;
        EXIT WHEN v_last IS NULL;
        UPDATE webhook_deliveries d
        SET destination_id = CASE
                WHEN d.state IN ('pending', 'processing') THEN
                    (SELECT ds.id FROM destinations ds
                     WHERE ds.endpoint_id = d.endpoint_id AND ds.kind = 'webhook'
                       AND ds.removed_at IS NULL
                     ORDER BY ds.position LIMIT 1)
                ELSE
                    (SELECT ds.id FROM destinations ds
                     WHERE ds.endpoint_id = d.endpoint_id AND ds.position = 1
                       AND ds.kind = 'webhook' AND ds.created_at <= d.created_at)
            END
        WHERE d.id > v_after AND d.id <= v_last AND d.destination_id IS NULL;
        COMMIT;
        v_after := v_last;
    END LOOP;
END
$$;
