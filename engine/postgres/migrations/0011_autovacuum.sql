-- Autovacuum for the tables that hold blob bytes
-- (docs/decisions/0026-autovacuum.md). A deleted blob's bytes are dead
-- TOAST rows until a vacuum removes them; by default autovacuum waits for
-- 50 rows plus 20% of the table's rows as of its last vacuum to be dead, a
-- share that a table once grown large (a blob_chunks row is 1 MiB, its
-- TOAST rows about 2 KB each) may not see again for gigabytes. Here a
-- vacuum starts once about 16 MiB plus 1% of the table is dead.
-- Setting storage parameters takes a SHARE UPDATE EXCLUSIVE lock: reads
-- and writes go on.
ALTER TABLE blob_chunks SET (
    autovacuum_vacuum_threshold = 16,
    autovacuum_vacuum_scale_factor = 0.01,
    toast.autovacuum_vacuum_threshold = 8192,
    toast.autovacuum_vacuum_scale_factor = 0.01
);
ALTER TABLE blobs SET (
    toast.autovacuum_vacuum_threshold = 8192,
    toast.autovacuum_vacuum_scale_factor = 0.01
);
