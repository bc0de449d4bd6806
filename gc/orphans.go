package gc

import (
	"context"
	"fmt"
	"time"
)

// OrphanSweeper is implemented by an engine that keeps large values in a
// bytes tier (a bucket; docs/decisions/0027-bytes-tier.md). An object is
// deleted only after the row naming it is, so a crash between the two
// leaves an orphan: an object no blob and no upload names. A sweep's
// orphan step finds and deletes them.
type OrphanSweeper interface {
	// SweepOrphans lists up to p.Limit of the bucket's objects, resuming
	// the listing where the last call left it (a durable cursor), and
	// deletes those older than p.Grace (by the bucket's modification time,
	// on the system clock) that no blob row and no upload names, checked
	// in one set-based statement per page, after confirming p.Lease. With
	// p.DryRun it deletes nothing and leaves the cursor. An engine without
	// a bytes tier reports nothing done. A bucket that cannot be reached
	// is an error wrapping steaderr.ErrUnavailable, and then nothing is
	// deleted.
	SweepOrphans(ctx context.Context, p OrphanParams) (Orphans, error)
}

// OrphanParams are the arguments of OrphanSweeper.SweepOrphans.
type OrphanParams struct {
	Limit  int
	Grace  time.Duration
	DryRun bool
	// Lease is the sweep lease the step runs under.
	Lease Lease
}

// Orphans is what one SweepOrphans call listed and deleted.
type Orphans struct {
	// Listed counts the objects listed; Deleted the orphans deleted (in a
	// dry run: that would be).
	Listed, Deleted int64
	// Wrapped reports that the listing reached the bucket's last object:
	// the next call starts again from the first.
	Wrapped bool
}

// Orphan step bounds: objects listed per call, and per sweep.
const (
	OrphanPage      = 1000
	OrphansPerSweep = 10 * OrphanPage
)

// sweepOrphans runs the orphan step of a sweep when the engine has one.
func (c *Collector) sweepOrphans(ctx context.Context, held *heldLease, dry bool, rep *Report, progress func()) error {
	o, ok := c.eng.(OrphanSweeper)
	if !ok {
		return nil
	}
	for rep.ObjectsListed < OrphansPerSweep {
		if err := held.keep(ctx); err != nil {
			return err
		}
		got, err := o.SweepOrphans(ctx, OrphanParams{Limit: OrphanPage, Grace: c.opts.Grace, DryRun: dry, Lease: held.lease})
		if err != nil {
			return fmt.Errorf("gc sweep: orphan objects: %w", err)
		}
		rep.ObjectsListed += got.Listed
		rep.Orphans += got.Deleted
		progress()
		if got.Wrapped || dry {
			return nil
		}
	}
	return nil
}
