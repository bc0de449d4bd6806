-- Garbage collection (docs/guides/gc.md, docs/decisions/0006-0010).
--
-- pins: one row per (key, owner); a pin is live while now() < expiry. A put
-- inserts or extends its row in the statement that publishes the blob; a
-- renewal only extends a live row; a sweep reaps expired rows. No foreign
-- key: an expired pin may outlive its blob until it is reaped.
CREATE TABLE pins (
    key    text COLLATE "C" NOT NULL,
    owner  text COLLATE "C" NOT NULL CHECK (owner <> ''),
    expiry timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
) WITH (fillfactor = 70);
CREATE INDEX pins_expiry ON pins (expiry);

-- gc_window: delete candidates. A key is taken for arbitration once
-- visible_after <= now.
CREATE TABLE gc_window (
    key           text COLLATE "C" PRIMARY KEY,
    visible_after timestamptz NOT NULL
);
CREATE INDEX gc_window_visible_after ON gc_window (visible_after);

-- gc_sources: the application's references, schema.table(column) of text
-- keys in this database. Every sweeper of the schema reads every row.
CREATE TABLE gc_sources (
    schema_name text NOT NULL,
    table_name  text NOT NULL,
    column_name text NOT NULL,
    PRIMARY KEY (schema_name, table_name, column_name)
);

-- gc_lease: the sweep lease behind PgBouncer transaction pooling, where a
-- session advisory lock is unsafe. One row, held until expiry.
CREATE TABLE gc_lease (
    name   text PRIMARY KEY,
    holder text NOT NULL,
    expiry timestamptz NOT NULL
);

-- gc_references returns the sources holding a reference to k, as
-- schema.table(column). Each source is read by its own statement, with a
-- fresh snapshot (the function is volatile), names quoted by format's %I.
-- search_path is the engine's schema, fixed when the function was made.
CREATE FUNCTION gc_references(k text) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    s record;
    found boolean;
BEGIN
    FOR s IN SELECT schema_name, table_name, column_name FROM gc_sources ORDER BY 1, 2, 3 LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE %I = $1)', s.schema_name, s.table_name, s.column_name)
            INTO found USING k;
        IF found THEN
            RETURN NEXT format('%I.%I(%I)', s.schema_name, s.table_name, s.column_name);
        END IF;
    END LOOP;
END
$$;

-- gc_stage stages every blob that no live pin (at the instant at) and no
-- source references and that is not staged yet, visible after at + grace,
-- in one set-based statement (anti-joins against pins and every source),
-- and returns how many it staged; with dry, it stages nothing and returns
-- how many it would.
CREATE FUNCTION gc_stage(at timestamptz, grace interval, dry boolean) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    q text;
    n bigint;
BEGIN
    SELECT 'SELECT b.key FROM blobs b'
        || ' WHERE NOT EXISTS (SELECT 1 FROM pins p WHERE p.key = b.key AND p.expiry > $1)'
        || ' AND NOT EXISTS (SELECT 1 FROM gc_window w WHERE w.key = b.key)'
        || coalesce(string_agg(format(' AND NOT EXISTS (SELECT 1 FROM %I.%I s WHERE s.%I = b.key)',
                                      schema_name, table_name, column_name), ''), '')
    INTO q FROM gc_sources;
    IF dry THEN
        EXECUTE 'SELECT count(*) FROM (' || q || ') c' INTO n USING at;
        RETURN n;
    END IF;
    EXECUTE 'INSERT INTO gc_window (key, visible_after) SELECT key, $1 + $2 FROM (' || q || ') c ON CONFLICT (key) DO NOTHING'
        USING at, grace;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
