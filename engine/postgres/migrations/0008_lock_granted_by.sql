-- The transaction that made a lock's current grant: an acquire reports its
-- grant new when the row names its own transaction
-- (docs/decisions/0004-locks.md). NULL: before this migration.
ALTER TABLE locks ADD COLUMN granted_by xid8;
