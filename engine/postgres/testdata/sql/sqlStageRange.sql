SELECT covered, staged, last_covered
FROM "St""ead. sch;ema-ñ".gc_stage_range(@after, @lim, coalesce(@now::timestamptz, now()), @grace_us * interval '1 microsecond', @dry_run)
