// Package recordstress holds only tests: worker processes (the test
// binary, re-executed) claim and checkpoint records on PostgreSQL while one
// is killed with SIGKILL mid-run; the test checks that another worker of
// the same group recovers every unfinished record once its leases expire,
// that every record completes exactly once, and that its saves form one
// version chain.
package recordstress
