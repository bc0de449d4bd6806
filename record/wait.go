package record

import (
	"context"
	"fmt"
	"time"

	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/internal/wake"
)

// The polling cadence of WaitClaimable where the engine cannot wake it:
// the first check comes pollMin after the first miss, and the gap doubles
// up to pollMax.
const (
	pollMin = 10 * time.Millisecond
	pollMax = time.Second
)

// WaitClaimable blocks until group has a claimable record and returns nil,
// or returns ctx's error once ctx ends. A claimer calls it when ClaimNext
// came back empty, then claims again; another claimer may have been
// faster, so that claim may come back empty too.
//
// It also returns when the earliest lease held in the group expires. On
// PostgreSQL it learns of new claimable records without polling: it marks
// the group wanted while it waits, and the commit that creates one or
// releases its lease then notifies the store's one listener connection
// (LISTEN/NOTIFY), which proves itself alive when quiet, so a connection
// cut without a word is noticed within seconds. While that connection is
// down or the group cannot be marked, elsewhere, and in PgBouncer mode
// without a listen URL, it polls, from every 10ms backing off to every
// second.
func (s *Store) WaitClaimable(ctx context.Context, group string) error {
	if err := validate.Name("group", group); err != nil {
		return fmt.Errorf("record wait claimable: %w", err)
	}
	poll := pollMin
	for {
		// Watch before probing: a commit after the probe wakes us.
		wakeup, live, stop, err := s.eng.WatchClaimable(ctx, group)
		if err != nil {
			return fmt.Errorf("record wait claimable %q: %w", group, err)
		}
		wait, err := s.probe(ctx, group)
		if err == nil && wait != 0 {
			if !live {
				if wait < 0 || wait > poll {
					wait = poll
				}
				poll = min(2*poll, pollMax)
			}
			err = wake.Sleep(ctx, wakeup, wait)
		}
		stop()
		if err != nil || wait == 0 {
			return err
		}
	}
}

// probe returns 0 when group has a claimable record now, else how long to
// wait before looking again: until the earliest lease expiry, or forever
// (a negative duration) when no lease is held.
func (s *Store) probe(ctx context.Context, group string) (time.Duration, error) {
	now, err := s.now()
	if err != nil {
		return 0, fmt.Errorf("record wait claimable %q: %w", group, err)
	}
	p, err := s.eng.Probe(ctx, ProbeParams{Group: group, Now: now})
	switch {
	case err != nil:
		return 0, fmt.Errorf("record wait claimable %q: %w", group, err)
	case p.Claimable:
		return 0, nil
	case p.Until > 0:
		return p.Until, nil
	}
	return -1, nil
}
