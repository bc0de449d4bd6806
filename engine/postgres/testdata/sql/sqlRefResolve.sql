SELECT r.name, r.key, r.version, r.annotation, r.expiry, r.weak, b.size, b.value, b.chunks, b.object,
	r.expiry IS NOT NULL AND 2 * (r.expiry - coalesce($2::timestamptz, now())) < $3::bigint * interval '1 microsecond'
FROM "St""ead. sch;ema-ñ".refs r JOIN "St""ead. sch;ema-ñ".blobs b ON b.key = r.key
WHERE r.name = $1 AND (r.expiry IS NULL OR r.expiry > coalesce($2::timestamptz, now()))
