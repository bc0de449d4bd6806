SELECT c FROM unnest($2::text[]) AS c
WHERE NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_edges WHERE parent = $1 AND child = c OFFSET 0)
