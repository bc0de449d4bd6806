CREATE SCHEMA "St""ead. sch;ema-ñ"
