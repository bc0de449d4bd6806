-- The writers of blob_edges record in gc_declared themselves that the
-- store declared liveness (engine/postgres/blob.go sqlPutEdges, chunks.go
-- sqlInsertEdges), as a ref's Set does since migration 15: the statement
-- trigger, a PL/pgSQL call over a transition table of the new edges, cost
-- a third of a put naming ten children
-- (docs/decisions/0050-put-statement-per-child-cost.md). The trigger on
-- gc_sources stays: a registration is rare.
DROP TRIGGER blob_edges_declare ON blob_edges;
