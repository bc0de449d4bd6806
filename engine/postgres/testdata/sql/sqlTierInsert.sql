INSERT INTO "St""ead. sch;ema-ñ".bytes_tier (id, store_id, bucket) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING
