WITH fin AS (
    UPDATE "St""ead. sch;ema-ñ".blob_chunks SET len = @len::bigint
    WHERE chunks = @set AND off = @off AND object = @object AND len IS NULL AND @len::bigint > 0
    RETURNING 1
), empty AS (
    DELETE FROM "St""ead. sch;ema-ñ".blob_chunks
    WHERE chunks = @set AND off = @off AND object = @object AND len IS NULL AND @len::bigint = 0
    RETURNING 1
), up AS (
    UPDATE "St""ead. sch;ema-ñ".blob_uploads
    SET size = @off::bigint + @len::bigint, state = @state, expires_at = coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond'
    WHERE id = @set AND EXISTS (SELECT FROM fin UNION ALL SELECT FROM empty)
)
SELECT EXISTS (SELECT FROM fin UNION ALL SELECT FROM empty)
