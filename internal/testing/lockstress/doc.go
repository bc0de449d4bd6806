// Package lockstress holds only tests: many goroutines in several worker
// processes (the test binary, re-executed) contend for a few locks with
// short leases on PostgreSQL and SQLite, while processes are killed and
// database sessions terminated. Holders write their fencing tokens to a
// resource that refuses stale ones; the recorded history is checked with
// porcupine and against the lease rules. Run longer with -locks.soak=2m.
package lockstress
