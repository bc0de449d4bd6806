WITH d AS (DELETE FROM "St""ead. sch;ema-ñ".records WHERE id = $1 RETURNING grp, version)
UPDATE "St""ead. sch;ema-ñ".record_groups g SET deleted_version = d.version
FROM d WHERE g.name = d.grp AND g.deleted_version < d.version
