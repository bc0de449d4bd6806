SELECT n FROM unnest($1::text[]) AS n
WHERE NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blobs b WHERE b.object = n)
AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_chunks c WHERE c.object = n)
