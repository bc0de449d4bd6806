SELECT name, key, version, annotation, expiry, weak,
	expiry IS NULL OR 2 * (expiry - coalesce($2::timestamptz, now())) >= $3::bigint * interval '1 microsecond'
FROM "St""ead. sch;ema-ñ".refs
WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($2::timestamptz, now()))
