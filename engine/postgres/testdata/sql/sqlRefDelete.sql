WITH live AS (
	SELECT name, version FROM "St""ead. sch;ema-ñ".refs
	WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($3::timestamptz, now()))
	FOR UPDATE
), d AS (
	DELETE FROM "St""ead. sch;ema-ñ".refs r USING live
	WHERE r.name = live.name AND ($2::bigint = 0 OR live.version = $2::bigint)
	RETURNING 1
)
SELECT EXISTS (SELECT FROM live), EXISTS (SELECT FROM d)
