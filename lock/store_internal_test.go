package lock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	var b backoff
	ceiling := minBackoff
	for i := range 20 {
		d := b.next()
		if d < ceiling/2 || d > ceiling {
			t.Fatalf("wait %d = %v, want within [%v, %v]", i, d, ceiling/2, ceiling)
		}
		ceiling = min(2*ceiling, maxBackoff)
	}
}

// grantingEngine grants, renews and releases everything.
type grantingEngine struct{}

func (grantingEngine) Acquire(_ context.Context, p AcquireParams) (AcquireResult, error) {
	now := time.Now()
	return AcquireResult{Granted: true, Grant: Grant{Name: p.Name, Owner: p.Owner, Token: 1, Expiry: now.Add(p.TTL)}, Now: now}, nil
}

func (grantingEngine) Renew(_ context.Context, p RenewParams) (time.Time, bool, error) {
	return time.Now().Add(p.TTL), true, nil
}

func (grantingEngine) Release(context.Context, ReleaseParams) (bool, error) { return true, nil }

func (grantingEngine) WatchReleases(context.Context, string) (<-chan struct{}, bool, func(), error) {
	return nil, false, func() {}, nil
}

// TestHeldReleaseStopsRenewer: Release returns only once the renewer has
// stopped, even when the release itself cannot run.
func TestHeldReleaseStopsRenewer(t *testing.T) {
	t.Parallel()
	s := NewStore(grantingEngine{}, Options{})
	h, ok, err := s.TryHold(t.Context(), "job", "alice", time.Minute)
	if !ok || err != nil {
		t.Fatalf("TryHold = %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.Release(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release with a cancelled context = %v, want context.Canceled", err)
	}
	select {
	case <-h.done:
	default:
		t.Fatal("the renewer still runs after Release returned")
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatalf("Release retried = %v", err)
	}
}
