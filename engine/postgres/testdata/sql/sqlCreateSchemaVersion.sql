CREATE TABLE IF NOT EXISTS "St""ead. sch;ema-ñ".schema_version (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())
