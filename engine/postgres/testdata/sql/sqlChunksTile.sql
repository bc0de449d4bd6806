SELECT coalesce(min(off) = 0 AND bool_and(len > 0 AND off + len = coalesce(next, $2)), false),
    count(*), coalesce(min(object), '')
FROM (
    SELECT off, len, object, lead(off) OVER (ORDER BY off) AS next
    FROM "St""ead. sch;ema-ñ".blob_chunks
    WHERE chunks = $1 AND len IS NOT NULL
) c
