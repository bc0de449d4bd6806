WITH g AS (
	INSERT INTO "St""ead. sch;ema-ñ".locks AS l (name, owner, token, expiry, granted_by)
	VALUES ($1, $2, 1, coalesce($3::timestamptz, now()) + $4::interval, pg_current_xact_id())
	ON CONFLICT (name) DO UPDATE SET
		owner        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN excluded.owner ELSE l.owner END,
		token        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN l.token + 1 ELSE l.token END,
		expiry       = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN excluded.expiry ELSE l.expiry END,
		granted_by   = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN excluded.granted_by ELSE l.granted_by END,
		wanted_until = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) OR l.owner = excluded.owner
			THEN l.wanted_until ELSE greatest(l.wanted_until, l.expiry) END
	WHERE (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) OR l.owner = excluded.owner OR $5::boolean
	RETURNING l.owner = $2, l.owner, l.token, l.expiry,
		l.owner = $2 AND l.granted_by IS NOT DISTINCT FROM pg_current_xact_id())
SELECT *, coalesce($3::timestamptz, now()) FROM g
UNION ALL
SELECT false, owner, token, expiry, false, coalesce($3::timestamptz, now()) FROM "St""ead. sch;ema-ñ".locks
WHERE name = $1 AND owner IS NOT NULL AND NOT EXISTS (SELECT FROM g)
