package gc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// A guard whose deadline passed before its renewal goroutine ran (a stalled
// process, a starved scheduler) is lost and its blob may be swept: Release
// must report ErrLost and close Lost, not return nil.
func TestPinReleaseReportsLostAfterMissedDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	eng := memory.New()
	t.Cleanup(func() { eng.Close() })
	s := blob.NewStore(eng.Blobs(), blob.Options{PinTTL: time.Hour, Owner: "me", Now: clk.Now})
	key, err := s.Put(ctx, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Pin(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour) // the renewal timer (20 minutes, real time) has not fired
	col := gc.New(eng.GC(), gc.Options{Grace: time.Microsecond, Now: clk.Now})
	for range 2 {
		if _, err := col.Sweep(ctx, gc.SweepOptions{AllUnreferenced: true}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("Stat after the guard's deadline and two sweeps = %v, want ErrNotFound", err)
	}
	if err := p.Release(ctx); !errors.Is(err, steaderr.ErrLost) {
		t.Errorf("Release after the guard's deadline passed = %v, want ErrLost", err)
	}
	select {
	case <-p.Lost():
	default:
		t.Error("Lost not closed after Release found the deadline passed")
	}
}
