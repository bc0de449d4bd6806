WITH l AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = ANY (@lock::text[]) ORDER BY key FOR KEY SHARE
), e AS (
	SELECT p, c FROM unnest(@parents::text[], @children::text[]) AS u(p, c)
), missing AS (
	SELECT p, c FROM e WHERE (SELECT count(*) FROM l) >= 0 AND c NOT IN (SELECT key FROM l)
), fixed AS (
	SELECT p, c FROM e WHERE p IN (SELECT key FROM l)
	AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_edges x WHERE x.parent = e.p AND x.child = e.c)
), refused AS (
	SELECT p FROM missing UNION SELECT p FROM fixed
), b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value, pin_owner, pin_expiry)
	SELECT k, s, v, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest(@keys::text[], @sizes::bigint[], @vals::bytea[], @blob_owners::text[], @blob_ttls::bigint[], @blob_nows::timestamptz[], @blob_plain::boolean[]) AS u(k, s, v, o, d, n, plain)
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
), pinned AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest(@pin_keys::text[], @pin_owners::text[], @pin_ttls::bigint[], @pin_nows::timestamptz[], @pin_plain::boolean[]) AS u(k, o, d, n, plain)
	WHERE (SELECT count(*) FROM b) >= 0
	AND (plain OR k NOT IN (SELECT p FROM refused UNION ALL SELECT p FROM raced))
	AND NOT EXISTS (SELECT FROM b WHERE b.key = u.k AND b.pin_owner = u.o)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT p, c, 'missing' FROM missing UNION ALL SELECT p, c, 'fixed' FROM fixed UNION ALL SELECT p, '', 'raced' FROM raced ORDER BY 1, 2
