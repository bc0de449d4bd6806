SELECT c.id, c.grp, t.name, c.status, c.version, c.lease_owner, c.lease_incarnation, c.lease_expiry, c.updated_at, c.payload
FROM (
	(SELECT * FROM "St""ead. sch;ema-ñ".records WHERE grp = $1 AND NOT parked AND lease_owner = '' ORDER BY id COLLATE "POSIX" LIMIT $3)
	UNION ALL
	(SELECT * FROM "St""ead. sch;ema-ñ".records WHERE grp = $1 AND NOT parked AND lease_owner <> '' AND lease_expiry <= coalesce($2::timestamptz, now()))
) c JOIN "St""ead. sch;ema-ñ".record_tenants t ON t.id = c.tenant_id
ORDER BY c.id LIMIT $3
