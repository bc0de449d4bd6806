SELECT covered, staged, last_covered
FROM "St""ead. sch;ema-ñ".gc_stage_range($1, $2, coalesce($3::timestamptz, now()), $4 * interval '1 microsecond', $5)
