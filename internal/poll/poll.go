// Package poll waits, in tests, for a state that must come about: never
// for time to pass.
package poll

import (
	"testing"
	"time"
)

// Timeout bounds every wait: long enough for a loaded machine, short
// enough to fail a hung test clearly.
const Timeout = 20 * time.Second

// Until calls cond every millisecond until it returns true, failing t if
// that takes longer than Timeout; what describes the awaited state.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting, after %v, for %s", Timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}
