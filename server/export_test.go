package server

import (
	"context"
	"time"
)

// SetSweepLeaseIdle sets how long s holds a sweep lease nobody renews.
func SetSweepLeaseIdle(s *Server, d time.Duration) { s.leases.idle = d }

// Collect runs s's background sweeps, one at each tick, until ctx ends or
// ticks closes.
func Collect(s *Server, ctx context.Context, ticks <-chan time.Time) { s.collect(ctx, ticks) }
