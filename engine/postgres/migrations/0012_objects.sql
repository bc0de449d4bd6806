-- The bytes tier (docs/decisions/0027-bytes-tier.md): values over the inline
-- limit kept as objects in a bucket. An upload names its object before a
-- byte of it is written; object_size is set once the object is whole and
-- durable. A blob kept in the bucket has an empty value and names its
-- object. The new columns have no default, so adding them rewrites nothing;
-- the partial indexes hold only rows that name an object.
ALTER TABLE blob_uploads ADD COLUMN object text, ADD COLUMN object_size bigint;
CREATE UNIQUE INDEX blob_uploads_object ON blob_uploads (object) WHERE object IS NOT NULL;
ALTER TABLE blobs ADD COLUMN object text;
CREATE UNIQUE INDEX blobs_object ON blobs (object) WHERE object IS NOT NULL;

-- The store's bytes tier, once one is used: the store id its bucket's
-- marker object names, the bucket (without credentials), and whether the
-- marker was written.
CREATE TABLE bytes_tier (
    id       integer PRIMARY KEY CHECK (id = 1),
    store_id text    NOT NULL,
    bucket   text    NOT NULL,
    claimed  boolean NOT NULL DEFAULT false
);

-- Where the orphan sweep stands in its listing of the bucket: the page
-- token of the next page (NULL: the first).
CREATE TABLE gc_orphans (
    id    integer PRIMARY KEY CHECK (id = 1),
    token bytea
);
INSERT INTO gc_orphans (id, token) VALUES (1, NULL);
