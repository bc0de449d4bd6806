UPDATE "St""ead. sch;ema-ñ".locks SET owner = NULL, expiry = NULL
WHERE name = $1 AND owner = $2 AND token = $3
RETURNING CASE WHEN wanted_until > now() THEN pg_notify($4, name) END
