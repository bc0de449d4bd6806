WITH l AS (
	SELECT name FROM "St""ead. sch;ema-ñ".record_groups
	WHERE name = $1 AND NOT coalesce(wanted_until >= now() + $3::interval, false)
	FOR UPDATE
), m AS (
	UPDATE "St""ead. sch;ema-ñ".record_groups g SET wanted_until = greatest(g.wanted_until, now() + $2::interval)
	FROM l WHERE g.name = l.name
	RETURNING g.wanted_until
)
SELECT coalesce((SELECT wanted_until FROM m), g.wanted_until), now() FROM "St""ead. sch;ema-ñ".record_groups g WHERE g.name = $1
