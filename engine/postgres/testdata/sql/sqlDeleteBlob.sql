WITH w AS (DELETE FROM "St""ead. sch;ema-ñ".gc_window WHERE key = $1),
p AS (DELETE FROM "St""ead. sch;ema-ñ".pins WHERE key = $1)
DELETE FROM "St""ead. sch;ema-ñ".blobs WHERE key = $1
