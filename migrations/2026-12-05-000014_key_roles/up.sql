-- What a management key may do: `admin` everything (every key made before roles existed
-- is one), `read` queries and subscriptions only (what a dashboard needs). The column has
-- a default, so adding it rewrites nothing and a process of the previous release, which
-- does not write it, still makes admin keys. Such a process does not read it either: make
-- read keys once every process runs this release (docs/operations.md).
ALTER TABLE management_api_keys
    ADD COLUMN role varchar(16) NOT NULL DEFAULT 'admin'
    CONSTRAINT management_api_keys_role_check CHECK (role IN ('admin', 'read'));
