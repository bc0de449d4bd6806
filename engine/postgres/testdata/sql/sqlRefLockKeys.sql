SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = ANY ($1::text[]) ORDER BY key FOR KEY SHARE
