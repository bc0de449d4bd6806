-- Blobs up to the inline limit, one row each. The key is the text form
-- ("sha256:" + 64 hex), collated "C" so comparison is bytewise and cheap.
-- size is stored so Stat never reads the value, and included in the key's
-- index so Stat and List can answer from the index alone. Rows are only
-- inserted and deleted, so fillfactor 90 leaves just a little room per page.
CREATE TABLE blobs (
    key   text COLLATE "C" NOT NULL,
    size  bigint NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (key) INCLUDE (size)
) WITH (fillfactor = 90);

-- Values are stored out of line without compression: content-addressed
-- values are mostly compressed already, and pglz's failed attempts halved
-- put throughput for incompressible values of 64 KiB to 1 MiB
-- (docs/decisions/0003-inline-limit.md).
ALTER TABLE blobs ALTER COLUMN value SET STORAGE EXTERNAL;
