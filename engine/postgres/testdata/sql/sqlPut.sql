WITH b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value)
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
)
INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
FROM unnest($4::text[], $5::text[], $6::bigint[], $7::timestamptz[]) AS u(k, o, d, n)
WHERE (SELECT count(*) FROM b) >= 0
ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
