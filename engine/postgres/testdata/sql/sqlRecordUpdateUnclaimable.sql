UPDATE "St""ead. sch;ema-ñ".records AS r
SET tenant_id = $4, status = $5, parked = $9, payload = $10, version = r.version + 1,
	updated_at = coalesce($11::timestamptz, now()),
	lease_owner = $6, lease_expiry = CASE WHEN $6 = '' THEN $8 ELSE r.lease_expiry END
WHERE r.id = $1 AND r.grp = $2 AND r.version = $3 AND ($6 = '' OR (r.lease_owner = $6 AND r.lease_incarnation = $7))
	AND ($9 OR r.lease_expiry > coalesce($11::timestamptz, now()))
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at
