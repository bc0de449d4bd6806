-- Versions of a record id never repeat across delete and re-create: a
-- group remembers the highest version a record of it had when deleted, and
-- a create starts above it (docs/decisions/0013-incarnation-and-tenant-rules.md).
ALTER TABLE record_groups ADD COLUMN deleted_version bigint NOT NULL DEFAULT 0;
