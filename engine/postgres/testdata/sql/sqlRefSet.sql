WITH b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = $2 FOR KEY SHARE
), cur AS (
	SELECT expiry FROM "St""ead. sch;ema-ñ".refs WHERE name = $1 AND EXISTS (SELECT FROM b) FOR NO KEY UPDATE
), w AS (
	INSERT INTO "St""ead. sch;ema-ñ".refs AS r (name, key, version, annotation, expiry, weak)
	SELECT $1, b.key, nextval('"St""ead. sch;ema-ñ".ref_versions'), $3,
	       CASE WHEN $4::bigint > 0 THEN coalesce($5::timestamptz, clock_timestamp()) + ($4::bigint / 1000000) * interval '1 second' + ($4::bigint % 1000000) * interval '1 microsecond' END,
	       $8::boolean
	FROM b LEFT JOIN cur ON true
	ON CONFLICT (name) DO UPDATE
	SET key = excluded.key, version = nextval('"St""ead. sch;ema-ñ".ref_versions'), annotation = excluded.annotation, expiry = excluded.expiry, weak = excluded.weak
	WHERE $6::bigint = 0 OR r.expiry IS NOT NULL AND r.expiry <= coalesce($5::timestamptz, now())
	RETURNING name, key, version, annotation, expiry, weak, xmax = 0 AS inserted
), d AS (
	INSERT INTO "St""ead. sch;ema-ñ".gc_declared (id) SELECT true FROM w
	WHERE NOT $7::boolean AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".gc_declared) LIMIT 1
	ON CONFLICT DO NOTHING
)
SELECT CASE WHEN w.name IS NOT NULL OR NOT $9::boolean THEN EXISTS (SELECT FROM b)
	ELSE ('stead: ref condition not met: ' || coalesce(w.name, ''))::int = 0 END,
	w.name, w.key, w.version, w.annotation, w.expiry, w.weak,
	coalesce(w.inserted OR cur.expiry <= coalesce($5::timestamptz, now()), false)
FROM (SELECT) AS one LEFT JOIN w ON true LEFT JOIN cur ON true
