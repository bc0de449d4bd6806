WITH b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = $2 FOR KEY SHARE
), w AS (
	UPDATE "St""ead. sch;ema-ñ".refs AS r
	SET key = $2, version = nextval('"St""ead. sch;ema-ñ".ref_versions'), annotation = $3,
	    expiry = CASE WHEN $4::bigint > 0 THEN coalesce($5::timestamptz, clock_timestamp()) + ($4::bigint / 1000000) * interval '1 second' + ($4::bigint % 1000000) * interval '1 microsecond' END,
	    weak = $7::boolean
	WHERE (SELECT count(*) FROM b) = 1 AND r.name = $1 AND r.version = $6::bigint
	  AND (r.expiry IS NULL OR r.expiry > coalesce($5::timestamptz, now()))
	RETURNING r.name, r.key, r.version, r.annotation, r.expiry, r.weak
)
SELECT CASE WHEN w.name IS NOT NULL OR NOT $8::boolean THEN EXISTS (SELECT FROM b)
	ELSE ('stead: ref condition not met: ' || coalesce(w.name, ''))::int = 0 END,
	w.name, w.key, w.version, w.annotation, w.expiry, w.weak, false
FROM (SELECT) AS one LEFT JOIN w ON true
