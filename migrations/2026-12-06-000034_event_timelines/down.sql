DROP TABLE event_timelines;
