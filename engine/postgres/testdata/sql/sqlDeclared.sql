SELECT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".gc_sources) OR EXISTS (SELECT FROM "St""ead. sch;ema-ñ".refs) OR EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_edges)
