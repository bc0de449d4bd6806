// Package testkit holds helpers for the module's tests: waiting for a
// state that must come about, and a buffer a test may read while another
// goroutine or process writes it. Nothing outside tests imports it.
package testkit

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Timeout bounds every wait: long enough for a loaded machine, short
// enough to fail a hung test clearly.
const Timeout = 20 * time.Second

// Until calls cond every millisecond until it returns true, failing t if
// that takes longer than Timeout; what describes the awaited state. It
// waits for a state, never for time to pass.
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

// Buffer is a bytes.Buffer safe for concurrent use, such as a child
// process's stdout and stderr at once. The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
