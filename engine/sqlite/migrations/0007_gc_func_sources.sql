-- gc_func_sources: the Go-function liveness sources registered on this
-- file, by name. A process that has not registered every one of them (the
-- CLI, another service) refuses to delete blobs: it cannot consult them.
CREATE TABLE gc_func_sources (
    name TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;
