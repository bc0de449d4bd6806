UPDATE "St""ead. sch;ema-ñ".blob_uploads
SET expires_at = greatest(expires_at, coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond')
WHERE id = @set
AND EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = @set AND off = @off AND object = @object AND len IS NULL)
