WITH c AS (
	DELETE FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = @chunks
), b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value, object, pin_owner, pin_expiry)
	VALUES (@key, @size, '\x'::bytea, @object, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
), p AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT @key, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond'
	WHERE (SELECT count(*) FROM b) = 0
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT EXISTS (SELECT FROM b)
