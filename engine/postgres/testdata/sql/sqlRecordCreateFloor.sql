UPDATE "St""ead. sch;ema-ñ".records AS r SET version = g.deleted_version + 1
FROM "St""ead. sch;ema-ñ".record_groups g
WHERE r.id = ANY ($1::text[]) AND g.name = r.grp AND r.version <= g.deleted_version
	AND r.xmin = pg_current_xact_id_if_assigned()::xid
RETURNING r.id, r.version
