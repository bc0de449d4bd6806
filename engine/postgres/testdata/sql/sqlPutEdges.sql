WITH probe AS MATERIALIZED (
	SELECT (SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = u.k FOR KEY SHARE) AS key FROM unnest($8::text[]) AS u(k)
), l AS (
	SELECT key FROM probe WHERE key IS NOT NULL
), e AS (
	SELECT p, c FROM unnest($9::text[], $10::text[]) AS u(p, c)
), missing AS (
	SELECT p, c FROM e WHERE (SELECT count(*) FROM l) >= 0 AND c NOT IN (SELECT key FROM l)
), fixed AS (
	SELECT p, c FROM e WHERE p IN (SELECT key FROM l)
	AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_edges x WHERE x.parent = e.p AND x.child = e.c OFFSET 0)
), refused AS (
	SELECT p FROM missing UNION SELECT p FROM fixed
), b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value, pin_owner, pin_expiry)
	SELECT k, s, v, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[], $5::bigint[], $6::timestamptz[], $7::boolean[]) AS u(k, s, v, o, d, n, plain)
	WHERE plain OR k NOT IN (SELECT p FROM refused)
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING key, pin_owner
), raced AS (
	SELECT DISTINCT p FROM e
	WHERE p NOT IN (SELECT p FROM refused) AND p NOT IN (SELECT key FROM l) AND p NOT IN (SELECT key FROM b)
), edges AS (
	INSERT INTO "St""ead. sch;ema-ñ".blob_edges (parent, child)
	SELECT p, c FROM e WHERE p NOT IN (SELECT p FROM refused) AND p NOT IN (SELECT p FROM raced)
	ON CONFLICT DO NOTHING
	RETURNING 1
), declared AS (
	INSERT INTO "St""ead. sch;ema-ñ".gc_declared (id) SELECT true
	WHERE EXISTS (SELECT FROM edges) AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".gc_declared)
	ON CONFLICT DO NOTHING
), pinned AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($11::text[], $12::text[], $13::bigint[], $14::timestamptz[], $15::boolean[]) AS u(k, o, d, n, plain)
	WHERE (SELECT count(*) FROM b) >= 0
	AND (plain OR k NOT IN (SELECT p FROM refused UNION ALL SELECT p FROM raced))
	AND NOT EXISTS (SELECT FROM b WHERE b.key = u.k AND b.pin_owner = u.o)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT p, c, 'missing' FROM missing UNION ALL SELECT p, c, 'fixed' FROM fixed UNION ALL SELECT p, '', 'raced' FROM raced
UNION ALL SELECT key, '', 'created' FROM b ORDER BY 1, 2
