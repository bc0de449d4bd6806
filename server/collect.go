package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/steadkit/stead/gc"
)

// collect sweeps the store at each tick until ctx ends or ticks closes. Each sweep takes
// the store's sweep lease, so servers of one database sweep one at a time
// (the others count busy). Each outcome is logged and counted in the
// stead_gc_* metrics.
func (s *Server) collect(ctx context.Context, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ticks:
			if !ok {
				return
			}
		}
		s.sweepNow(ctx)
	}
}

// sweepNow runs the mounts' collections and one background sweep, then
// logs and counts it, and reads the mounts' usage.
func (s *Server) sweepNow(ctx context.Context) {
	for _, m := range s.opts.Mounts {
		if m.Collect == nil {
			continue
		}
		if err := m.Collect(ctx); err != nil && ctx.Err() == nil {
			s.gcMetrics.collectErrors.Inc()
			s.log.Error("gc: collection of "+m.Prefix+" failed", "err", err)
		}
	}
	rep, err := s.gc.Sweep(ctx, gc.SweepOptions{})
	if ctx.Err() != nil {
		return // shutting down: the sweep was cut short
	}
	s.noteSweep(rep, err, time.Now())
	s.noteUsage(ctx)
	switch {
	case errors.Is(err, gc.ErrNoLiveness):
		s.log.Info("gc: sweep deleted nothing: the store never declared liveness (never a ref, a blob reference or a source)")
	case err != nil:
		s.log.Error("gc: sweep failed", "err", err)
	case rep.Aborted != "":
		s.log.Debug("gc: another server is sweeping", "aborted", rep.Aborted)
	default:
		attrs := []any{slog.Int64("reaped_pins", rep.Reaped), slog.Int64("reaped_refs", rep.ReapedRefs),
			slog.Int64("uploads", rep.Uploads), slog.Int64("taken", rep.Taken), slog.Int64("deleted", rep.Deleted),
			slog.Int64("bytes_freed", rep.BytesFreed), slog.Int64("rescued", rep.Rescued), slog.Int64("staged", rep.Staged),
			slog.Int64("covered", rep.Covered), slog.Int64("orphans", rep.Orphans)}
		if st := rep.Stored; st != nil {
			attrs = append(attrs, slog.Int64("stored_blobs", st.Blobs), slog.Int64("stored_bytes", st.Bytes),
				slog.Int64("pending_blobs", st.PendingBlobs), slog.Int64("pending_bytes", st.PendingBytes))
		}
		s.log.Info("gc: swept", append(attrs, slog.Duration("duration", rep.Duration))...)
	}
}
