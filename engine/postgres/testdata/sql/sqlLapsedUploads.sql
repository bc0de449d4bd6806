SELECT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_uploads WHERE expires_at <= coalesce($1::timestamptz, now()))
