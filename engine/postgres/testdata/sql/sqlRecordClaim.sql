UPDATE "St""ead. sch;ema-ñ".records AS r
SET version = r.version + 1, lease_owner = $1, lease_incarnation = r.lease_incarnation + 1,
	lease_expiry = coalesce($3::timestamptz, now()) + $2::interval, updated_at = coalesce($3::timestamptz, now())
WHERE r.id = $5 AND r.grp = $4 AND (r.lease_owner IN ('', $1) OR r.lease_expiry <= coalesce($3::timestamptz, now()))
RETURNING r.id, r.grp, (SELECT name FROM "St""ead. sch;ema-ñ".record_tenants WHERE id = r.tenant_id), r.status, r.version,
	r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
