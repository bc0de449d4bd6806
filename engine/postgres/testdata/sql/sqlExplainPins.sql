SELECT owner, expiry FROM "St""ead. sch;ema-ñ".pins WHERE key = $1 ORDER BY owner
