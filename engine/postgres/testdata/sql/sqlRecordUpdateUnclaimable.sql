UPDATE "St""ead. sch;ema-ñ".records AS r
SET tenant_id = @tenant_id, status = @status, parked = @parked, payload = @payload, version = r.version + 1,
	updated_at = coalesce(@now::timestamptz, now()),
	lease_owner = @lease_owner, lease_expiry = CASE WHEN @lease_owner = '' THEN @lease_expiry ELSE r.lease_expiry END
WHERE r.id = @id AND r.grp = @grp AND r.version = @version AND (@lease_owner = '' OR (r.lease_owner = @lease_owner AND r.lease_incarnation = @lease_incarnation))
	AND (@parked OR r.lease_expiry > coalesce(@now::timestamptz, now()))
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at
