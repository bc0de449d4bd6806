INSERT INTO "St""ead. sch;ema-ñ".records AS r
	(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
SELECT @id::text, @grp::text, @tenant_id::bigint, @status::text, @parked::boolean,
	coalesce((SELECT g.deleted_version FROM "St""ead. sch;ema-ñ".record_groups g WHERE g.name = @grp), 0) + 1,
	@lease_owner::text, @lease_incarnation::bigint, @lease_expiry::timestamptz, coalesce(@now::timestamptz, now()), @payload::bytea
ON CONFLICT (id) DO NOTHING
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
	CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
		CASE WHEN (SELECT g.wanted_until > now() FROM "St""ead. sch;ema-ñ".record_groups g WHERE g.name = r.grp FOR KEY SHARE)
		THEN pg_notify(@channel, r.grp) END
	END
