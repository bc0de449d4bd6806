-- Garbage collection at scale (docs/decisions/0021-gc-at-scale.md).

-- The pin of the put that first stores a blob lives in the blob's row, so a
-- lone put writes one row. pins keeps every other pin: other owners', later
-- re-puts', Pin guards'. The pin (key, owner) is the later of the two
-- where both exist. An expired inline pin is simply not live; nothing reaps
-- it.
-- The columns are added without a default and the owner's check NOT VALID,
-- so that nothing rewrites or scans the table while it is locked: every
-- existing row's owner is NULL, which the check accepts anyway.
ALTER TABLE blobs
    ADD COLUMN pin_owner  text COLLATE "C",
    ADD COLUMN pin_expiry timestamptz,
    ADD CONSTRAINT blobs_pin_owner_check CHECK (pin_owner <> '') NOT VALID;

-- The staging pass's durable cursor: the last key it covered ('' when the
-- next range starts a new pass) and when the pass began.
CREATE TABLE gc_pass (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    last_key text COLLATE "C" NOT NULL DEFAULT '',
    started  timestamptz
);
INSERT INTO gc_pass DEFAULT VALUES;

-- Chunks go with their blobs once per statement, set-based, instead of a
-- DELETE per row: an arbitration deletes a thousand blobs at a time.
DROP TRIGGER blobs_drop_chunks ON blobs;
DROP FUNCTION blobs_drop_chunks();
CREATE FUNCTION blobs_drop_chunks() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM blob_chunks c USING dropped d WHERE c.chunks = d.chunks;
    RETURN NULL;
END
$$;
CREATE TRIGGER blobs_drop_chunks AFTER DELETE ON blobs
    REFERENCING OLD TABLE AS dropped
    FOR EACH STATEMENT EXECUTE FUNCTION blobs_drop_chunks();

-- gc_referenced returns those of keys some registered source references,
-- with the source, as schema.table(column). Each source is read by its own
-- statement, with a fresh snapshot (the function is volatile), names quoted
-- by format's %I. The keys come in as an array parameter, so a source
-- column's collation (whatever it is) decides the comparison, and the
-- answer holds the keys as given. A source that can no longer be read (its
-- table or column dropped, its type changed) fails the call with an error
-- naming it, its SQLSTATE kept.
DROP FUNCTION gc_references(text);
CREATE FUNCTION gc_referenced(keys text[]) RETURNS TABLE (k text, src text)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    s record;
    name text;
BEGIN
    FOR s IN SELECT schema_name, table_name, column_name FROM gc_sources ORDER BY 1, 2, 3 LOOP
        name := format('%I.%I(%I)', s.schema_name, s.table_name, s.column_name);
        BEGIN
            RETURN QUERY EXECUTE format(
                'SELECT u.k, $2 FROM unnest($1) AS u(k) WHERE EXISTS (SELECT 1 FROM %I.%I t WHERE t.%I = u.k)',
                s.schema_name, s.table_name, s.column_name) USING keys, name;
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION USING ERRCODE = SQLSTATE,
                MESSAGE = format('liveness source %s: %s', name, SQLERRM);
        END;
    END LOOP;
END
$$;

-- gc_stage_range stages, visible after at + grace, those of the first lim
-- keys after from_key that no live pin (inline or in pins) and no source
-- protects and that are not staged yet, and, unless dry, records the pass's
-- cursor. Its work is bounded by lim, whatever the store's size.
-- last_covered is NULL when the range reached the last stored key.
DROP FUNCTION gc_stage(timestamptz, interval, boolean);
CREATE FUNCTION gc_stage_range(from_key text, lim integer, at timestamptz, grace interval, dry boolean,
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
