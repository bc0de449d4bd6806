-- Refs and blob references: liveness declared in stead's own tables
-- (docs/decisions/0022-refs-and-references.md).

-- refs: a named pointer to a blob that keeps it alive while it is live (no
-- expiry, or an expiry still ahead). Setting one locks its key's blob row
-- as a put does. version comes from one sequence for the whole store, so a
-- name deleted and set again never reuses a version.
CREATE SEQUENCE ref_versions;
CREATE TABLE refs (
    name       text COLLATE "C" PRIMARY KEY,
    key        text COLLATE "C" NOT NULL,
    version    bigint NOT NULL,
    annotation bytea,
    expiry     timestamptz
) WITH (fillfactor = 80);
CREATE INDEX refs_key ON refs (key);
CREATE INDEX refs_expiry ON refs (expiry) WHERE expiry IS NOT NULL;

-- blob_edges: parent references child. A child is kept while an edge names
-- it; a parent's edges are written by its put (which locks the children's
-- rows) and deleted with it.
CREATE TABLE blob_edges (
    parent text COLLATE "C" NOT NULL,
    child  text COLLATE "C" NOT NULL,
    PRIMARY KEY (parent, child)
);
CREATE INDEX blob_edges_child ON blob_edges (child);

-- gc_stage_range also leaves out blobs a live ref or an edge names.
CREATE OR REPLACE FUNCTION gc_stage_range(from_key text, lim integer, at timestamptz, grace interval, dry boolean,
    OUT covered bigint, OUT staged bigint, OUT last_covered text)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    cand text[];
BEGIN
    SELECT count(*), max(r.key), array_agg(r.key) FILTER (WHERE r.free)
    INTO covered, last_covered, cand
    FROM (
        SELECT b.key,
               coalesce(b.pin_expiry <= at, true)
               AND NOT EXISTS (SELECT 1 FROM pins p WHERE p.key = b.key AND p.expiry > at)
               AND NOT EXISTS (SELECT 1 FROM refs f WHERE f.key = b.key AND (f.expiry IS NULL OR f.expiry > at))
               AND NOT EXISTS (SELECT 1 FROM blob_edges e WHERE e.child = b.key)
               AND NOT EXISTS (SELECT 1 FROM gc_window w WHERE w.key = b.key) AS free
        FROM blobs b
        WHERE b.key > from_key
        ORDER BY b.key
        LIMIT lim
    ) r;
    IF covered < lim THEN
        last_covered := NULL;
    END IF;
    -- Every source is read even for no candidates, so a source that can
    -- no longer be read fails every sweep, not only those with garbage.
    cand := ARRAY(SELECT c FROM unnest(cand) AS c EXCEPT SELECT g.k FROM gc_referenced(coalesce(cand, '{}')) AS g);
    staged := coalesce(cardinality(cand), 0);
    IF dry THEN
        RETURN;
    END IF;
    IF staged > 0 THEN
        INSERT INTO gc_window (key, visible_after)
        SELECT c, at + grace FROM unnest(cand) AS c
        ON CONFLICT (key) DO NOTHING;
        GET DIAGNOSTICS staged = ROW_COUNT;
    END IF;
    UPDATE gc_pass SET last_key = coalesce(last_covered, ''),
                       started = CASE WHEN from_key = '' THEN at ELSE started END;
END
$$;
