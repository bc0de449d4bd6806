DELETE FROM "St""ead. sch;ema-ñ".blob_uploads WHERE expires_at < now() RETURNING id
