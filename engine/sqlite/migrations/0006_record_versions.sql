-- Versions of a record id never repeat across delete and re-create: a
-- group remembers the highest version a record of it had when deleted, and
-- a create starts above it (docs/decisions/0013-incarnation-and-tenant-rules.md).
ALTER TABLE record_groups ADD COLUMN deleted_version INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER records_deleted_version AFTER DELETE ON records
WHEN OLD.version > (SELECT deleted_version FROM record_groups WHERE name = OLD.grp)
BEGIN
    UPDATE record_groups SET deleted_version = OLD.version WHERE name = OLD.grp;
END;
