package enginetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// testFaults checks that an engine hands the errors of the engine it
// stands on back to its caller as they were: the sentinel stays matchable
// with errors.Is whichever capability failed. It needs Harness.Faulty;
// over a network (the remote engine) this is the wire mapping of every
// error code back to its sentinel.
func testFaults(t *testing.T, h Harness) {
	if h.Faulty == nil {
		t.Skip("the harness has no fault-injected engine (Harness.Faulty)")
	}
	var (
		mu   sync.Mutex
		arm  = map[faultengine.Op]error{}
		fail = func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			return arm[faultengine.Op(op)]
		}
	)
	eng := h.Faulty(t, fail)
	t.Cleanup(func() { _ = eng.Close() })
	b := bundleOf(t, eng, blob.Options{})
	records := record.NewStore(eng.Records(), record.Options{})
	ctx := t.Context()
	key := absentKey("faults")
	calls := []struct {
		op   faultengine.Op
		call func() error
	}{
		{faultengine.BlobStat, func() error { _, err := b.store.Stat(ctx, key); return err }},
		{faultengine.BlobGet, func() error { _, err := b.store.Get(ctx, key); return err }},
		{faultengine.BlobDelete, func() error { return b.store.Delete(ctx, key) }},
		{faultengine.LockAcquire, func() error { _, _, err := b.locks.TryLock(ctx, "faults", "owner", time.Minute); return err }},
		{faultengine.LockRelease, func() error {
			_, err := eng.Locks().Release(ctx, lock.ReleaseParams{Name: "faults", Owner: "owner", Token: 1})
			return err
		}},
		{faultengine.RecordLoad, func() error { _, err := records.Load(ctx, "faults"); return err }},
		{faultengine.RecordRegisterGroup, func() error { return records.RegisterGroup(ctx, "faults") }},
		{faultengine.SchemaVersion, func() error { _, _, err := eng.SchemaVersion(ctx); return err }},
	}
	sentinels := []error{
		steaderr.ErrNotFound, steaderr.ErrConflict, steaderr.ErrInvalidKey, steaderr.ErrInvalidName,
		steaderr.ErrInvalidArgument, steaderr.ErrDigestMismatch, steaderr.ErrTooLarge, steaderr.ErrProtected,
		steaderr.ErrUnknownGroup, steaderr.ErrWrongGroup, steaderr.ErrLeased, steaderr.ErrLost,
		steaderr.ErrClosed, steaderr.ErrSchema, steaderr.ErrUnavailable, errors.ErrUnsupported,
	}
	for _, c := range calls {
		for _, sentinel := range sentinels {
			mu.Lock()
			arm[c.op] = fmt.Errorf("%w: injected into %s", sentinel, c.op)
			mu.Unlock()
			err := c.call()
			mu.Lock()
			delete(arm, c.op)
			mu.Unlock()
			if !errors.Is(err, sentinel) {
				t.Errorf("%s failing with %v: the caller got %v, not an error wrapping it", c.op, sentinel, err)
			}
		}
	}
}
