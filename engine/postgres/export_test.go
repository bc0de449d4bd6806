package postgres

// RecordSQL returns the engine's claimable listing and ClaimNext
// statements, for tests to explain.
func RecordSQL(e *Engine) (list, claimNext string) {
	return e.records.sql.list, e.records.sql.claimNext
}

// ListenChannel returns the channel the engine's saves notify.
func ListenChannel(e *Engine) string { return e.records.listen.channel }
