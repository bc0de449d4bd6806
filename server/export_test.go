package server

import "time"

// SetSweepLeaseIdle sets how long s holds a sweep lease nobody renews.
func SetSweepLeaseIdle(s *Server, d time.Duration) { s.leases.idle = d }
