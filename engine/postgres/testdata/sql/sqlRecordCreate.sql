INSERT INTO "St""ead. sch;ema-ñ".records AS r
	(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
SELECT $1::text, $2::text, $3::bigint, $4::text, $5::boolean,
	coalesce((SELECT g.deleted_version FROM "St""ead. sch;ema-ñ".record_groups g WHERE g.name = $2), 0) + 1,
	$6::text, $7::bigint, $8::timestamptz, coalesce($10::timestamptz, now()), $9::bytea
ON CONFLICT (id) DO NOTHING
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
	CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
		CASE WHEN (SELECT g.wanted_until > now() FROM "St""ead. sch;ema-ñ".record_groups g WHERE g.name = r.grp FOR KEY SHARE)
		THEN pg_notify($11, r.grp) END
	END
