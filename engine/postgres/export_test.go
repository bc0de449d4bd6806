package postgres

// RecordSQL returns the engine's claimable listing, ClaimNext and Probe
// statements, for tests to explain.
func RecordSQL(e *Engine) (list, claimNext, probe string) {
	return e.records.sql.list, e.records.sql.claimNext, e.records.sql.probe
}

// ListenChannel returns the channel the engine's saves notify.
func ListenChannel(e *Engine) string { return e.records.listen.channel }
