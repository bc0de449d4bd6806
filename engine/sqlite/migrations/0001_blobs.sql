-- Blobs stored inline, one row per key.
--
-- A rowid table, not WITHOUT ROWID: a WITHOUT ROWID table keeps whole rows
-- in its primary-key b-tree, which SQLite recommends only for rows under
-- about a twentieth of a page. Values here run from bytes to the inline
-- limit (256 KiB), so the key b-tree would hold roughly 1 KiB of value
-- prefix per entry and a handful of entries per page. With a rowid table the
-- key index (the primary key's automatic index) stays dense, about 80 bytes
-- an entry, and the value sits in the table b-tree and its overflow pages.
--
-- key is NOT NULL because a rowid table, unlike WITHOUT ROWID, would
-- otherwise accept NULL primary keys.
--
-- size comes before value: a record is decoded front to back, so reading
-- key and size (Stat, List) stops before the value and never follows its
-- overflow chain.
CREATE TABLE blobs (
    key   TEXT    NOT NULL PRIMARY KEY,
    size  INTEGER NOT NULL,
    value BLOB    NOT NULL
);
