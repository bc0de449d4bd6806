package clock

import (
	"sync"
	"time"
)

// Fake is a clock for tests that moves only when told to. It is safe for
// concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// FakeStart is a start for a Fake whose nanoseconds are not whole
// microseconds, so that a test notices a layer that fails to truncate.
var FakeStart = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// NewFake returns a Fake reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the clock's reading.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t, which may be anywhere, even before its reading.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
