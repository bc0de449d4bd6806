SET LOCAL search_path TO "St""ead. sch;ema-ñ"
