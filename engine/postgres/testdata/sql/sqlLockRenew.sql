UPDATE "St""ead. sch;ema-ñ".locks SET expiry = coalesce(@now::timestamptz, now()) + @ttl::interval
WHERE name = @name AND owner = @owner AND token = @token
RETURNING expiry
