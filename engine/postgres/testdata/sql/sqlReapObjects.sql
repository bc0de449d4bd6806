SELECT object FROM "St""ead. sch;ema-ñ".blob_uploads WHERE expires_at < now() AND object IS NOT NULL
