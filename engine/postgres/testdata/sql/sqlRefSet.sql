WITH b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = @key FOR NO KEY UPDATE
), live AS (
	SELECT version FROM "St""ead. sch;ema-ñ".refs WHERE name = @name AND (expiry IS NULL OR expiry > coalesce(@now::timestamptz, now()))
), w AS (
	INSERT INTO "St""ead. sch;ema-ñ".refs AS r (name, key, version, annotation, expiry)
	SELECT @name, key, nextval('"St""ead. sch;ema-ñ".ref_versions'), @annotation,
	       CASE WHEN @ttl::bigint > 0 THEN coalesce(@now::timestamptz, now()) + @ttl::bigint * interval '1 microsecond' END
	FROM b
	WHERE CASE @cond::int WHEN 1 THEN NOT EXISTS (SELECT FROM live)
	                      WHEN 2 THEN EXISTS (SELECT FROM live WHERE version = @version)
	                      ELSE true END
	ON CONFLICT (name) DO UPDATE
	SET key = excluded.key, version = excluded.version, annotation = excluded.annotation, expiry = excluded.expiry
	WHERE CASE @cond::int WHEN 1 THEN r.expiry IS NOT NULL AND r.expiry <= coalesce(@now::timestamptz, now())
	                      WHEN 2 THEN r.version = @version AND (r.expiry IS NULL OR r.expiry > coalesce(@now::timestamptz, now()))
	                      ELSE true END
	RETURNING name, key, version, annotation, expiry
)
SELECT EXISTS (SELECT FROM b), w.name, w.key, w.version, w.annotation, w.expiry
FROM (SELECT) AS one LEFT JOIN w ON true
