-- The WAL timelines this database has been written on. A failover starts a new timeline;
-- with asynchronous replication the promoted server may lack the last events the old
-- primary committed, and its sequences would hand their ids out again, to events a
-- subscriber would then skip as already seen. The first connection of the service on a
-- new timeline records it here and moves the event id sequences far past anything the
-- old timeline can have handed out (db/sql/enter_timeline.sql); the row makes that
-- happen once per timeline, whichever process gets there first.
CREATE TABLE event_timelines (
    timeline   integer     NOT NULL,
    entered_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT event_timelines_pkey PRIMARY KEY (timeline)
);

-- The timeline the database is on now is where its ids came from: nothing to move.
INSERT INTO event_timelines (timeline)
SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
