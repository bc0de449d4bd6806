-- gc_declared: whether the store ever declared liveness — a ref, a blob
-- reference or a liveness source (docs/decisions/0033-input-fences.md).
-- Its one row, once there, stays: a store whose last ref is deleted is
-- swept as before, not refused as one that never declared anything.
CREATE TABLE gc_declared (
    id INTEGER PRIMARY KEY CHECK (id = 1)
);
INSERT INTO gc_declared (id) SELECT 1
WHERE EXISTS (SELECT 1 FROM refs) OR EXISTS (SELECT 1 FROM blob_edges) OR EXISTS (SELECT 1 FROM gc_func_sources);
CREATE TRIGGER refs_declare AFTER INSERT ON refs WHEN NOT EXISTS (SELECT 1 FROM gc_declared)
BEGIN INSERT OR IGNORE INTO gc_declared (id) VALUES (1); END;
CREATE TRIGGER blob_edges_declare AFTER INSERT ON blob_edges WHEN NOT EXISTS (SELECT 1 FROM gc_declared)
BEGIN INSERT OR IGNORE INTO gc_declared (id) VALUES (1); END;
CREATE TRIGGER gc_func_sources_declare AFTER INSERT ON gc_func_sources WHEN NOT EXISTS (SELECT 1 FROM gc_declared)
BEGIN INSERT OR IGNORE INTO gc_declared (id) VALUES (1); END;
