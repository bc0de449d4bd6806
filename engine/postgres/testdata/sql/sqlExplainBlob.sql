SELECT size, pin_owner, pin_expiry, coalesce(object, '') FROM "St""ead. sch;ema-ñ".blobs WHERE key = $1
