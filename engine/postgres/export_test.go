package postgres

// LockChannel returns the channel e announces lock releases on.
func LockChannel(e *Engine) string { return e.locks.channel }
