WITH target AS (
	SELECT key FROM "St""ead. sch;ema-ñ".refs WHERE name = $1
), b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = (SELECT key FROM target) FOR KEY SHARE
), u AS (
	UPDATE "St""ead. sch;ema-ñ".refs
	SET expiry = CASE WHEN expiry IS NOT NULL THEN coalesce($3::timestamptz, clock_timestamp()) + ($2::bigint / 1000000) * interval '1 second' + ($2::bigint % 1000000) * interval '1 microsecond' END
	WHERE name = $1 AND key = (SELECT key FROM b) AND (expiry IS NULL OR expiry > coalesce($3::timestamptz, clock_timestamp()))
	RETURNING name, key, version, annotation, expiry, weak
)
SELECT (SELECT key FROM target), u.name, u.key, u.version, u.annotation, u.expiry, u.weak
FROM (SELECT) AS one LEFT JOIN u ON true
