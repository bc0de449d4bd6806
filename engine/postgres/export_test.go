package postgres

import "time"

// LockChannel returns the channel e announces lock releases on.
func LockChannel(e *Engine) string { return e.locks.channel }

// RecordChannel returns the channel e's record saves notify.
func RecordChannel(e *Engine) string { return e.records.channel }

// ListenQuery returns the statement e's listener runs; pg_stat_activity
// shows it as the listening backend's query.
func ListenQuery(e *Engine) string { return e.listen.query }

// RecordSQL returns the engine's claimable listing, ClaimNext and Probe
// statements, for tests to explain.
func RecordSQL(e *Engine) (list, claimNext, probe string) {
	return e.records.sql.list, e.records.sql.claimNext, e.records.sql.probe
}

// SetProveEvery sets how often e's listener proves its connection alive;
// call it before anything watches.
func SetProveEvery(e *Engine, d time.Duration) { e.listen.proveEvery = d }
