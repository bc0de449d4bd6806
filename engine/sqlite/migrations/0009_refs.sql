-- Refs and blob references (docs/decisions/0022-refs-and-references.md).
-- Times are Unix microseconds; expiry NULL means never. Versions come from
-- one counter, so a name deleted and set again never reuses one.
CREATE TABLE refs (
    name       TEXT    NOT NULL PRIMARY KEY,
    key        TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    annotation BLOB,
    expiry     INTEGER
) WITHOUT ROWID;
CREATE INDEX refs_key ON refs (key);
CREATE INDEX refs_expiry ON refs (expiry) WHERE expiry IS NOT NULL;
CREATE TABLE ref_versions (last INTEGER NOT NULL);
INSERT INTO ref_versions (last) VALUES (0);

-- blob_edges: parent references child; deleted with the parent.
CREATE TABLE blob_edges (
    parent TEXT NOT NULL,
    child  TEXT NOT NULL,
    PRIMARY KEY (parent, child)
) WITHOUT ROWID;
CREATE INDEX blob_edges_child ON blob_edges (child);
