-- Full-text search over what was submitted: every string value of a submission's fields
-- (names are not searched), as the `simple` configuration splits it (words lower-cased,
-- no stemming, so a name, an address or a word in any language is found as written). The
-- tsvector is the database's own, computed from `fields` by this index's expression
-- (json_to_tsvector is immutable): no column to keep in step, nothing for intake to do,
-- and no rewrite of the table. Built CONCURRENTLY, as migration destination_due_index
-- explains: a plain build would hold every write to submissions while it reads them all.
-- src/db/submissions.rs `filtered` writes the same expression, so the planner uses it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS submissions_search_idx
    ON submissions USING gin (json_to_tsvector('simple'::regconfig, fields, '["string"]'::jsonb));
