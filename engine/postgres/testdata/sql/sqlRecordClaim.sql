UPDATE "St""ead. sch;ema-ñ".records AS r
SET version = r.version + 1, lease_owner = @owner, lease_incarnation = r.lease_incarnation + 1,
	lease_expiry = coalesce(@now::timestamptz, now()) + @ttl::interval, updated_at = coalesce(@now::timestamptz, now())
WHERE r.id = @id AND r.grp = @grp AND (r.lease_owner IN ('', @owner) OR r.lease_expiry <= coalesce(@now::timestamptz, now()))
RETURNING r.id, r.grp, (SELECT name FROM "St""ead. sch;ema-ñ".record_tenants WHERE id = r.tenant_id), r.status, r.version,
	r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
