SELECT
	(SELECT id FROM "St""ead. sch;ema-ñ".records WHERE grp = $1 AND NOT parked AND lease_owner = '' ORDER BY id COLLATE "POSIX" LIMIT 1) IS NOT NULL,
	(SELECT lease_expiry FROM "St""ead. sch;ema-ñ".records WHERE grp = $1 AND NOT parked AND lease_owner <> '' ORDER BY lease_expiry LIMIT 1),
	coalesce($2::timestamptz, now())
