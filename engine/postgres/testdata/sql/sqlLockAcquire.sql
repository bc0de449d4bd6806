WITH g AS (
	INSERT INTO "St""ead. sch;ema-ñ".locks AS l (name, owner, token, expiry, granted_by)
	VALUES (@name, @owner, 1, coalesce(@now::timestamptz, now()) + @ttl::interval, pg_current_xact_id())
	ON CONFLICT (name) DO UPDATE SET
		owner        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce(@now::timestamptz, now()))
			THEN excluded.owner ELSE l.owner END,
		token        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce(@now::timestamptz, now()))
			THEN l.token + 1 ELSE l.token END,
		expiry       = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce(@now::timestamptz, now()))
			THEN excluded.expiry ELSE l.expiry END,
		granted_by   = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce(@now::timestamptz, now()))
			THEN excluded.granted_by ELSE l.granted_by END,
		wanted_until = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce(@now::timestamptz, now())) OR l.owner = excluded.owner
			THEN l.wanted_until ELSE greatest(l.wanted_until, l.expiry) END
	WHERE (l.owner IS NULL OR l.expiry <= coalesce(@now::timestamptz, now())) OR l.owner = excluded.owner OR @wait::boolean
	RETURNING l.owner = @owner, l.owner, l.token, l.expiry,
		l.owner = @owner AND l.granted_by IS NOT DISTINCT FROM pg_current_xact_id())
SELECT *, coalesce(@now::timestamptz, now()) FROM g
UNION ALL
SELECT false, owner, token, expiry, false, coalesce(@now::timestamptz, now()) FROM "St""ead. sch;ema-ñ".locks
WHERE name = @name AND owner IS NOT NULL AND NOT EXISTS (SELECT FROM g)
