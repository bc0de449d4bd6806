WITH b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value, pin_owner, pin_expiry)
	VALUES ($1, $2, $3, $4, coalesce($6::timestamptz, now()) + $5::bigint * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING key
), pinned AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT $1, $4, coalesce($6::timestamptz, now()) + $5::bigint * interval '1 microsecond'
	WHERE NOT EXISTS (SELECT FROM b)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT key FROM b
