WITH b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value, pin_owner, pin_expiry)
	SELECT k, s, v, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[], $5::bigint[], $6::timestamptz[]) AS u(k, s, v, o, d, n)
	ON CONFLICT (key) DO NOTHING
	RETURNING key, pin_owner
), pinned AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($7::text[], $8::text[], $9::bigint[], $10::timestamptz[]) AS u(k, o, d, n)
	WHERE (SELECT count(*) FROM b) >= 0
	AND NOT EXISTS (SELECT FROM b WHERE b.key = u.k AND b.pin_owner = u.o)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT key FROM b
