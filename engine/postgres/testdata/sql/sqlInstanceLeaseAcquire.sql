INSERT INTO "St""ead. sch;ema-ñ".gc_lease AS l (name, holder, expiry)
VALUES ($1, $2, now() + $3 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expiry = excluded.expiry
WHERE l.expiry <= now()
RETURNING holder
