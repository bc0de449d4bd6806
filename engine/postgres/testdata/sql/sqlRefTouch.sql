WITH b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = (SELECT key FROM "St""ead. sch;ema-ñ".refs WHERE name = $1) FOR NO KEY UPDATE
)
UPDATE "St""ead. sch;ema-ñ".refs
SET expiry = CASE WHEN expiry IS NOT NULL THEN coalesce($3::timestamptz, now()) + $2 * interval '1 microsecond' END
WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($3::timestamptz, clock_timestamp())) AND EXISTS (SELECT FROM b)
RETURNING name, key, version, annotation, expiry
