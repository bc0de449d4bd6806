INSERT INTO "St""ead. sch;ema-ñ".records AS r
	(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, coalesce($10::timestamptz, now()), $9)
ON CONFLICT (id) DO NOTHING
RETURNING r.lease_incarnation, r.lease_expiry, r.updated_at,
	CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN pg_notify($11, r.grp) END
