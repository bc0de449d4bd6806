UPDATE "St""ead. sch;ema-ñ".records SET lease_expiry = coalesce(@now::timestamptz, now()) + @ttl::interval
WHERE id = @id AND grp = @grp AND lease_owner = @owner AND lease_incarnation = @incarnation
RETURNING lease_expiry
