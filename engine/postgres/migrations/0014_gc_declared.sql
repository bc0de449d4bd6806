-- gc_declared: whether the store ever declared liveness — a ref, a blob
-- reference or a liveness source (docs/decisions/0033-input-fences.md).
-- Its one row, once there, stays: a store whose last ref is deleted is
-- swept as before, not refused as one that never declared anything. The
-- triggers act once per statement, and only until the row exists.
CREATE TABLE gc_declared (
    id boolean PRIMARY KEY DEFAULT true CHECK (id)
);
INSERT INTO gc_declared (id) SELECT true
WHERE EXISTS (SELECT FROM refs) OR EXISTS (SELECT FROM blob_edges) OR EXISTS (SELECT FROM gc_sources);
CREATE FUNCTION gc_declare() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO gc_declared (id) SELECT true
    WHERE NOT EXISTS (SELECT FROM gc_declared) AND EXISTS (SELECT FROM declaring)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER refs_declare AFTER INSERT ON refs
    REFERENCING NEW TABLE AS declaring FOR EACH STATEMENT EXECUTE FUNCTION gc_declare();
CREATE TRIGGER blob_edges_declare AFTER INSERT ON blob_edges
    REFERENCING NEW TABLE AS declaring FOR EACH STATEMENT EXECUTE FUNCTION gc_declare();
CREATE TRIGGER gc_sources_declare AFTER INSERT ON gc_sources
    REFERENCING NEW TABLE AS declaring FOR EACH STATEMENT EXECUTE FUNCTION gc_declare();
