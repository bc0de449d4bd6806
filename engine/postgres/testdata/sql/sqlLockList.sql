SELECT name, owner, token, expiry FROM "St""ead. sch;ema-ñ".locks
WHERE name >= @prefix AND name < @prefix_end AND name > @after
	AND owner IS NOT NULL AND expiry > coalesce(@now::timestamptz, now())
ORDER BY name LIMIT @lim
