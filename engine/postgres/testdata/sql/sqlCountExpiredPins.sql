SELECT count(*) FROM "St""ead. sch;ema-ñ".pins WHERE expiry <= coalesce($1::timestamptz, now())
