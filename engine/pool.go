package engine

// PoolStats is a snapshot of an engine's database connection pool.
type PoolStats struct {
	// Open is the connections open, idle or in use.
	Open int
	// Idle is the open connections no caller holds.
	Idle int
	// InUse is the connections callers hold.
	InUse int
	// Max is the most connections the pool opens.
	Max int
	// EmptyAcquires counts the acquires that found no idle connection and
	// waited, since the pool opened.
	EmptyAcquires int64
}

// PoolReporter is implemented by an engine that keeps a connection pool
// (PostgreSQL's), for servers that export its statistics as metrics. It
// is optional: an engine without a pool does not implement it.
type PoolReporter interface {
	PoolStats() PoolStats
}
