SELECT c.id, c.grp, t.name, c.status, c.version, c.lease_owner, c.lease_incarnation, c.lease_expiry, c.updated_at, c.payload
FROM "St""ead. sch;ema-ñ".records c JOIN "St""ead. sch;ema-ñ".record_tenants t ON t.id = c.tenant_id
WHERE c.grp = $1 AND NOT c.parked AND c.lease_owner <> '' AND c.lease_expiry > coalesce($2::timestamptz, now())
	AND c.id COLLATE "POSIX" > $3
ORDER BY c.id COLLATE "POSIX" LIMIT $4
