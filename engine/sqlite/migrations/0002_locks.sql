-- Named locks, one row per name ever granted. The row is both the lock and
-- the name's fencing-token counter: a release clears owner and expiry but
-- keeps token, the last token granted, so a later grant takes token + 1
-- and a token never repeats. Rows of names no longer used stay (a few
-- dozen bytes each with short names); deleting one would restart its
-- counter.
--
-- owner is NULL when the lock is free; expiry is in Unix microseconds,
-- NULL when free. A grant is expired when expiry <= now.
--
-- WITHOUT ROWID: rows are small, and every access is by name.
CREATE TABLE locks (
    name   TEXT    NOT NULL PRIMARY KEY,
    owner  TEXT,
    token  INTEGER NOT NULL,
    expiry INTEGER
) WITHOUT ROWID;
