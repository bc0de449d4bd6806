-- gc_stage_range reads its range from the key's index alone and the
-- other tables only within the range (docs/BENCHMARKS.md, "The 1M-blob
-- sweep"). Judging the inline pin in the range's scan read every blob's
-- row, a heap page a key in an order unrelated to the key's; and a
-- per-key probe of pins, refs, edges or the window could be planned as a
-- hash of the whole table, a cost that grows with the store, not with
-- lim. Now the range's keys come from an index-only scan, the keys the
-- other tables name are read between from_key and the range's last key,
-- the sources are asked about what is left, and the inline pins are
-- judged last, a row read a remaining candidate. It stages the same keys.
CREATE OR REPLACE FUNCTION gc_stage_range(from_key text, lim integer, at timestamptz, grace interval, dry boolean,
    OUT covered bigint, OUT staged bigint, OUT last_covered text)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    cand text[];
BEGIN
    -- One statement, so one snapshot: the range, and what names a key of
    -- it, each read by its key's index between from_key and hi.k.
    WITH r AS MATERIALIZED (
        SELECT b.key FROM blobs b WHERE b.key > from_key ORDER BY b.key LIMIT lim
    ), hi AS (
        SELECT max(r.key) AS k FROM r
    )
    SELECT (SELECT count(*) FROM r), hi.k, ARRAY(
        SELECT r.key FROM r
        EXCEPT SELECT p.key FROM pins p WHERE p.key > from_key AND p.key <= hi.k AND p.expiry > at
        EXCEPT SELECT f.key FROM refs f WHERE f.key > from_key AND f.key <= hi.k AND NOT f.weak AND (f.expiry IS NULL OR f.expiry > at)
        EXCEPT SELECT e.child FROM blob_edges e WHERE e.child > from_key AND e.child <= hi.k
        EXCEPT SELECT w.key FROM gc_window w WHERE w.key > from_key AND w.key <= hi.k)
    INTO covered, last_covered, cand
    FROM hi;
    IF covered < lim THEN
        last_covered := NULL;
    END IF;
    -- Every source is read even for no candidates, so a source that can
    -- no longer be read fails every sweep, not only those with garbage.
    cand := ARRAY(SELECT c FROM unnest(cand) AS c EXCEPT SELECT g.k FROM gc_referenced(cand) AS g);
    -- The inline pins of what is left, a probe of the key's index and a
    -- row read a key (a subquery per key, never a scan of blobs); a blob
    -- deleted meanwhile is no candidate either. Its pins rows are read
    -- again in the same statement, so a pin handed from the blob's row to
    -- a pins row after the first statement is seen on one side.
    cand := ARRAY(SELECT c FROM unnest(cand) AS c
        WHERE (SELECT coalesce(b.pin_expiry <= at, true) FROM blobs b WHERE b.key = c)
          AND NOT EXISTS (SELECT FROM pins p WHERE p.key = c AND p.expiry > at));
    staged := cardinality(cand);
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
