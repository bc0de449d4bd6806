SELECT name, key, version, annotation, expiry, weak FROM "St""ead. sch;ema-ñ".refs
WHERE name >= @prefix AND (@prefix_end::text IS NULL OR name < @prefix_end) AND name > @after
AND (expiry IS NULL OR expiry > coalesce(@now::timestamptz, now()))
ORDER BY name LIMIT @lim
