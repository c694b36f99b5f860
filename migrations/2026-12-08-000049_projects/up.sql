-- Projects: a team's endpoints and the keys that may see them. Every endpoint belongs to
-- one; a key belongs to one (it sees that project only) or to none (it sees every project,
-- as every key made before projects existed does). An installation's endpoints move into
-- the default project, which the id below names everywhere (`ProjectId::DEFAULT`); a
-- column with a constant default rewrites no row.
CREATE TABLE projects (
    id varchar(36) PRIMARY KEY CONSTRAINT projects_id_format CHECK (id ~ '^prj_[0-9a-f]{32}$'),
    name varchar(200) NOT NULL,
    created_at timestamptz NOT NULL,
    -- Set when it was deleted: its keys stop working, its name stays for the audit trail.
    deleted_at timestamptz
);

INSERT INTO projects (id, name, created_at)
VALUES ('prj_00000000000000000000000000000000', 'Default', now());

ALTER TABLE endpoints
    ADD COLUMN project_id varchar(36) NOT NULL DEFAULT 'prj_00000000000000000000000000000000'
        CONSTRAINT endpoints_project_id_fkey REFERENCES projects (id);
CREATE INDEX endpoints_project_idx ON endpoints (project_id, created_at DESC, id DESC);

-- A key's project (NULL: every project) and when it stops working (NULL: never).
ALTER TABLE management_api_keys
    ADD COLUMN project_id varchar(36) CONSTRAINT management_api_keys_project_id_fkey REFERENCES projects (id),
    ADD COLUMN expires_at timestamptz;

-- The audit trail: one entry per change made through the management API (and per
-- export), written in the change's own transaction, so that every committed change has
-- its entry and no entry outlives a rolled-back change. `key_id` names the key (kept
-- after the key is revoked); `project_id` the project of what was changed (NULL: no one
-- project's, such as a key for every project); `address_digest` an HMAC of the client's
-- address, never the address.
CREATE TABLE audit_entries (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL,
    key_id varchar(35) NOT NULL,
    key_name varchar(200) NOT NULL,
    project_id varchar(36),
    operation varchar(64) NOT NULL,
    targets text[] NOT NULL,
    changes jsonb NOT NULL,
    address_digest varchar(64)
);
CREATE INDEX audit_entries_at_idx ON audit_entries (at);
CREATE INDEX audit_entries_project_idx ON audit_entries (project_id, id);
