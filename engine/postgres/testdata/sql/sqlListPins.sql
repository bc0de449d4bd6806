SELECT key, owner, expiry FROM "St""ead. sch;ema-ñ".pins ORDER BY key, owner
