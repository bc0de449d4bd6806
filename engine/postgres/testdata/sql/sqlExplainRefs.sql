SELECT name, expiry, weak FROM "St""ead. sch;ema-ñ".refs WHERE key = $1 ORDER BY name
