INSERT INTO "St""ead. sch;ema-ñ".blob_uploads (id, expires_at, owner, state)
SELECT @id, coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond', @owner, @state
WHERE NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = @id)
ON CONFLICT (id) DO NOTHING
RETURNING id
