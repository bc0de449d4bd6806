UPDATE "St""ead. sch;ema-ñ".records AS r
SET version = r.version + 1, lease_owner = $1, lease_incarnation = r.lease_incarnation + 1,
	lease_expiry = coalesce($3::timestamptz, now()) + $2::interval, updated_at = coalesce($3::timestamptz, now())
WHERE r.id = ANY (ARRAY (
	WITH expired AS (
		SELECT id FROM "St""ead. sch;ema-ñ".records
		WHERE grp = $4 AND NOT parked AND lease_owner <> '' AND lease_expiry <= coalesce($3::timestamptz, now())
		ORDER BY lease_expiry, id COLLATE "POSIX" LIMIT $5 FOR UPDATE SKIP LOCKED
	), unleased AS (
		SELECT id FROM "St""ead. sch;ema-ñ".records
		WHERE grp = $4 AND NOT parked AND lease_owner = ''
		ORDER BY id COLLATE "POSIX" LIMIT $5 FOR UPDATE SKIP LOCKED
	)
	SELECT id FROM expired UNION ALL SELECT id FROM unleased LIMIT $5
))
RETURNING r.id, r.grp, (SELECT name FROM "St""ead. sch;ema-ñ".record_tenants WHERE id = r.tenant_id), r.status, r.version,
	r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
