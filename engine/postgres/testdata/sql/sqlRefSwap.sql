WITH b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = @key FOR KEY SHARE
), w AS (
	UPDATE "St""ead. sch;ema-ñ".refs AS r
	SET key = @key, version = nextval('"St""ead. sch;ema-ñ".ref_versions'), annotation = @annotation,
	    expiry = CASE WHEN @ttl::bigint > 0 THEN coalesce(@now::timestamptz, clock_timestamp()) + (@ttl::bigint / 1000000) * interval '1 second' + (@ttl::bigint % 1000000) * interval '1 microsecond' END,
	    weak = @weak::boolean
	WHERE (SELECT count(*) FROM b) = 1 AND r.name = @name AND r.version = @version::bigint
	  AND (r.expiry IS NULL OR r.expiry > coalesce(@now::timestamptz, now()))
	RETURNING r.name, r.key, r.version, r.annotation, r.expiry, r.weak
)
SELECT EXISTS (SELECT FROM b), w.name, w.key, w.version, w.annotation, w.expiry, w.weak, false
FROM (SELECT) AS one LEFT JOIN w ON true
