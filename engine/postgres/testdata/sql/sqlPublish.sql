WITH up AS (
	DELETE FROM "St""ead. sch;ema-ñ".blob_uploads WHERE id = $3 RETURNING id
), b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value, chunks)
	SELECT $1, $2, '\x'::bytea, id FROM up
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
), discard AS (
	DELETE FROM "St""ead. sch;ema-ñ".blob_chunks
	WHERE chunks = (SELECT id FROM up) AND NOT EXISTS (SELECT FROM b)
), p AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT $1, $4, coalesce($6::timestamptz, now()) + $5 * interval '1 microsecond'
	FROM up
	WHERE (SELECT count(*) FROM b) >= 0
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT EXISTS (SELECT FROM up)
