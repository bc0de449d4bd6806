UPDATE "St""ead. sch;ema-ñ".locks SET owner = NULL, expiry = NULL
WHERE name = @name AND owner = @owner AND token = @token
RETURNING CASE WHEN wanted_until > now() THEN pg_notify(@channel, name) END
