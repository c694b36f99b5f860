-- Erases an endpoint and everything of it (deleteEndpoint with `history: ERASE`): its
-- attempts, events, deliveries, their counts, submissions (their files are detached by
-- the foreign key and swept after), destinations with their throttles and the digests
-- of the addresses their autoresponders answered, its own events and its row. One
-- statement after another, in the caller's transaction, children before parents: the
-- counts' trigger subtracts the deliveries as they go, before the counts themselves go.
-- Answers nothing; the caller has locked the endpoint's row.
CREATE FUNCTION erase_endpoint(p_endpoint varchar) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_destinations varchar[] :=
        ARRAY(SELECT ds.id FROM destinations ds WHERE ds.endpoint_id = p_endpoint);
BEGIN
    DELETE FROM delivery_attempts a
    USING webhook_deliveries d
    WHERE a.delivery_id = d.id AND d.endpoint_id = p_endpoint;
    DELETE FROM delivery_events WHERE endpoint_id = p_endpoint;
    DELETE FROM webhook_deliveries WHERE endpoint_id = p_endpoint;
    DELETE FROM delivery_state_counts WHERE endpoint_id = p_endpoint;
    DELETE FROM submissions WHERE endpoint_id = p_endpoint;
    DELETE FROM destination_throttles WHERE destination_id = ANY (v_destinations);
    DELETE FROM autoresponder_recipients WHERE destination_id = ANY (v_destinations);
    DELETE FROM destinations WHERE endpoint_id = p_endpoint;
    DELETE FROM endpoint_events WHERE endpoint_id = p_endpoint;
    DELETE FROM endpoints WHERE id = p_endpoint;
END
$$;
