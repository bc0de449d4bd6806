WITH live AS (
	SELECT version FROM "St""ead. sch;ema-ñ".refs WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($3::timestamptz, now()))
), d AS (
	DELETE FROM "St""ead. sch;ema-ñ".refs
	WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($3::timestamptz, now())) AND ($2 = 0 OR version = $2)
	RETURNING 1
)
SELECT EXISTS (SELECT FROM live), EXISTS (SELECT FROM d)
