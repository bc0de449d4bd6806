-- Named locks, one row per name ever granted. The row is both the lock and
-- the name's fencing-token counter: a release clears owner and expiry but
-- keeps token, the last token granted, so a later grant takes token + 1
-- and a token never repeats, whatever order transactions commit in (the
-- row lock serializes them). Rows of names no longer used stay (about
-- 160 bytes each with short names); deleting one would restart its counter.
--
-- owner is NULL when the lock is free; a grant is expired when
-- expiry <= now. wanted_until is set by waiters refused while the lock was
-- held, to the holder's expiry: a release before then sends a NOTIFY,
-- others do not (a NOTIFY serializes commits across the whole server).
--
-- Every grant, renewal and release updates the row in place without
-- touching the key, so fillfactor 50 leaves room on each page for
-- heap-only (HOT) updates, which skip the index and are pruned on the page
-- without waiting for vacuum.
CREATE TABLE locks (
    name         text COLLATE "C" PRIMARY KEY,
    owner        text COLLATE "C",
    token        bigint NOT NULL,
    expiry       timestamptz,
    wanted_until timestamptz
) WITH (fillfactor = 50);
