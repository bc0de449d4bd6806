-- A ref's Set records in gc_declared itself that the store declared
-- liveness (engine/postgres/refs.go, sqlRefSet): the statement trigger on
-- refs, a PL/pgSQL call and a transition table on every Set, cost as much
-- as the rest of the statement. Sets are the only inserts into refs
-- (Swap and Touch update a ref that Set wrote, which declared already).
DROP TRIGGER refs_declare ON refs;
