-- File uploads (docs/intake.md, "Files"). An endpoint takes file parts only when its
-- `file_uploads` holds its limits and allowed types (NULL: off, intake refuses file parts
-- as before). A JSON object rather than five columns: the settings are read and written
-- together, only by this service, and checked by its rules (model/files.rs) on the way in.
-- Adding a nullable column without a default rewrites nothing.
ALTER TABLE endpoints ADD COLUMN file_uploads jsonb;

-- One row per uploaded file. The row is written before any byte of the file is stored
-- (in submission_file_chunks or as an object), with submission_id NULL: an upload that
-- never gets attached (a refused submission, a dropped connection, a crash) is found by
-- the sweeper through this row, object and all. The outbox statement attaches the rows
-- of a submission in the transaction that writes it (attached_at). Erasing a submission
-- sets submission_id back to NULL (ON DELETE SET NULL), and the file is removed with its
-- bytes right after, or by the sweeper should that be interrupted.
CREATE TABLE submission_files (
    id            varchar(36) NOT NULL,
    endpoint_id   varchar(64) NOT NULL,
    submission_id varchar(36) REFERENCES submissions (id) ON DELETE SET NULL,
    -- The form field the file came in.
    field         varchar(1024) NOT NULL,
    -- The client's file name, as sent (display only: never a path on this server).
    name          varchar(1024) NOT NULL,
    -- The type judged from the content's first bytes, not the client's word.
    content_type  varchar(255) NOT NULL,
    size_bytes    bigint NOT NULL DEFAULT 0,
    -- Lowercase hex, set once every byte is stored.
    sha256        varchar(64),
    -- 'postgres': the bytes are rows of submission_file_chunks; 's3': one object.
    storage       varchar(16) NOT NULL,
    object_key    varchar(1024),
    -- Its order among the submission's files.
    position      integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    attached_at   timestamptz,
    CONSTRAINT submission_files_pkey PRIMARY KEY (id),
    -- As the other ids are checked (migration cheaper_id_checks): a length and an open
    -- repetition.
    CONSTRAINT submission_files_id_format CHECK (length(id) = 36 AND id ~ '^fil_[0-9a-f]+$'),
    CONSTRAINT submission_files_size_non_negative CHECK (size_bytes >= 0),
    CONSTRAINT submission_files_storage_valid CHECK (storage IN ('postgres', 's3')),
    CONSTRAINT submission_files_object_key CHECK ((storage = 's3') = (object_key IS NOT NULL))
);
-- A new, empty table: plain index builds hold nothing for long.
CREATE INDEX submission_files_submission_id_idx ON submission_files (submission_id);
-- What the sweeper reads: rows without a submission, oldest first.
CREATE INDEX submission_files_unattached_idx ON submission_files (created_at)
    WHERE submission_id IS NULL;

-- A file stored in PostgreSQL, in rows of at most 256 KiB written as the part streams in
-- (never the whole file in memory). EXTERNAL: out of line without compression, since most
-- uploads (images, PDF, office documents) are compressed already and trying again costs
-- CPU for nothing.
CREATE TABLE submission_file_chunks (
    file_id  varchar(36) NOT NULL REFERENCES submission_files (id) ON DELETE CASCADE,
    seq      integer NOT NULL,
    data     bytea NOT NULL,
    CONSTRAINT submission_file_chunks_pkey PRIMARY KEY (file_id, seq)
);
ALTER TABLE submission_file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- Keys the server makes once and every process shares (the first to start inserts,
-- the others read): `file_links` signs the download links of files.
CREATE TABLE server_secrets (
    name       varchar(64) NOT NULL,
    secret     bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT server_secrets_pkey PRIMARY KEY (name)
);
