SELECT parent FROM "St""ead. sch;ema-ñ".blob_edges WHERE child = $1 ORDER BY parent
