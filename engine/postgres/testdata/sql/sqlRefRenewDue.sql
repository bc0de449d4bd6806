WITH b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = $2 FOR KEY SHARE
)
UPDATE "St""ead. sch;ema-ñ".refs
SET expiry = coalesce($4::timestamptz, clock_timestamp()) + ($3::bigint / 1000000) * interval '1 second' + ($3::bigint % 1000000) * interval '1 microsecond'
WHERE name = $1 AND key = (SELECT key FROM b) AND version = $5::bigint
  AND expiry > coalesce($4::timestamptz, clock_timestamp())
  AND 2 * (expiry - coalesce($4::timestamptz, clock_timestamp())) < $3::bigint * interval '1 microsecond'
RETURNING name, key, version, annotation, expiry, weak
