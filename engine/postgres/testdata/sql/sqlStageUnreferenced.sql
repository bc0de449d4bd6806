SELECT "St""ead. sch;ema-ñ".gc_stage(coalesce($1::timestamptz, now()), $2 * interval '1 microsecond', $3)
