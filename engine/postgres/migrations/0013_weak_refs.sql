-- Weak refs (docs/decisions/0031-weak-refs.md): a weak ref names its key
-- without keeping it, and is deleted with it.
ALTER TABLE refs ADD COLUMN weak boolean NOT NULL DEFAULT false;

-- The registry's blob links, oci/<repo>/_blobs/<digest>, named the empty
-- blob so as to keep nothing: each becomes a weak ref to the blob its name
-- carries, or goes if that blob is no longer stored (a stale link). The
-- blobs' rows are locked first, as a ref's Set locks its key's row, so an
-- arbitration running meanwhile cannot delete one under its new link.
WITH link AS (
    SELECT name, right(name, 71) AS target FROM refs
    WHERE key = 'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
      AND name LIKE 'oci/%/\_blobs/sha256:%' AND substr(name, length(name) - 78, 8) = '/_blobs/'
), stored AS (
    SELECT key FROM blobs WHERE key IN (SELECT target FROM link) ORDER BY key FOR NO KEY UPDATE
)
UPDATE refs r SET key = link.target, weak = true
FROM link JOIN stored ON stored.key = link.target
WHERE r.name = link.name;
DELETE FROM refs
WHERE key = 'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' AND NOT weak
  AND name LIKE 'oci/%/\_blobs/sha256:%' AND substr(name, length(name) - 78, 8) = '/_blobs/';

-- gc_stage_range leaves out blobs a live strong ref names; a weak one
-- keeps nothing.
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
               AND NOT EXISTS (SELECT 1 FROM refs f WHERE f.key = b.key AND NOT f.weak AND (f.expiry IS NULL OR f.expiry > at))
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
