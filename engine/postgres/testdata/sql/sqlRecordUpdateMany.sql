WITH i AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[],
		$8::timestamptz[], $9::boolean[], $10::bytea[], $11::timestamptz[])
		AS i (id, grp, version, tenant_id, status, lease_owner, lease_incarnation, lease_expiry, parked, payload, at)
), locked AS (
	SELECT r.id FROM "St""ead. sch;ema-ñ".records r JOIN i ON i.id = r.id ORDER BY r.id FOR UPDATE OF r
)
UPDATE "St""ead. sch;ema-ñ".records AS r
SET tenant_id = i.tenant_id, status = i.status, parked = i.parked, payload = i.payload, version = r.version + 1,
	updated_at = coalesce(i.at, now()),
	lease_owner = i.lease_owner, lease_expiry = CASE WHEN i.lease_owner = '' THEN i.lease_expiry ELSE r.lease_expiry END
FROM i JOIN locked l ON l.id = i.id
WHERE r.id = i.id AND r.grp = i.grp AND r.version = i.version
	AND (i.lease_owner = '' OR (r.lease_owner = i.lease_owner AND r.lease_incarnation = i.lease_incarnation))
RETURNING r.id, r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
	CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
		CASE WHEN (SELECT g.wanted_until > now() FROM "St""ead. sch;ema-ñ".record_groups g WHERE g.name = r.grp FOR KEY SHARE)
		THEN pg_notify($12, r.grp) END
	END
