WITH u AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::timestamptz[], $6::boolean[]) WITH ORDINALITY AS u(n, k, a, d, t, weak, i)
), b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key IN (SELECT k FROM u) ORDER BY key COLLATE "C" FOR KEY SHARE
), cur AS (
	SELECT name, expiry FROM "St""ead. sch;ema-ñ".refs WHERE name IN (SELECT n FROM u) AND (SELECT count(*) FROM b) >= 0
	ORDER BY name COLLATE "C" FOR NO KEY UPDATE
), w AS (
	INSERT INTO "St""ead. sch;ema-ñ".refs AS r (name, key, version, annotation, expiry, weak)
	SELECT u.n, b.key, nextval('"St""ead. sch;ema-ñ".ref_versions'), u.a,
	       CASE WHEN u.d > 0 THEN coalesce(u.t, clock_timestamp()) + (u.d / 1000000) * interval '1 second' + (u.d % 1000000) * interval '1 microsecond' END,
	       u.weak
	FROM u JOIN b ON b.key = u.k
	WHERE (SELECT count(*) FROM cur) >= 0
	ORDER BY u.i
	ON CONFLICT (name) DO UPDATE
	SET key = excluded.key, version = nextval('"St""ead. sch;ema-ñ".ref_versions'), annotation = excluded.annotation, expiry = excluded.expiry, weak = excluded.weak
	RETURNING name, key, version, annotation, expiry, weak, xmax = 0 AS inserted
), d AS (
	INSERT INTO "St""ead. sch;ema-ñ".gc_declared (id) SELECT true FROM w
	WHERE NOT $7::boolean AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".gc_declared) LIMIT 1
	ON CONFLICT DO NOTHING
)
SELECT CASE WHEN w.name IS NOT NULL THEN true ELSE ('stead: ref condition not met: ' || u.n)::int = 0 END,
	w.name, w.key, w.version, w.annotation, w.expiry, w.weak,
	coalesce(w.inserted OR cur.expiry <= coalesce(u.t, now()), false)
FROM u LEFT JOIN w ON w.name = u.n LEFT JOIN cur ON cur.name = u.n ORDER BY u.i
