-- Garbage collection (docs/guides/gc.md). Times are Unix microseconds.
--
-- pins: one row per (key, owner); a pin is live while now < expiry. A put
-- inserts or extends its row in the transaction that publishes the blob.
CREATE TABLE pins (
    key    TEXT    NOT NULL,
    owner  TEXT    NOT NULL CHECK (owner <> ''),
    expiry INTEGER NOT NULL,
    PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX pins_expiry ON pins (expiry);

-- gc_window: delete candidates, taken once visible_after <= now.
CREATE TABLE gc_window (
    key           TEXT    NOT NULL PRIMARY KEY,
    visible_after INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX gc_window_visible_after ON gc_window (visible_after);
