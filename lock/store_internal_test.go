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

func (grantingEngine) ListHeld(context.Context, ListParams) ([]Grant, error) { return nil, nil }

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

// slowGrantEngine's Acquire is a statement that takes effect whatever
// happens to its caller: it grants once proceed is closed, reporting its
// context's error if that ended meanwhile, as a database cut off
// mid-statement may.
type slowGrantEngine struct {
	grantingEngine
	arrived, proceed chan struct{}
	released         chan ReleaseParams
}

func (e *slowGrantEngine) Acquire(ctx context.Context, p AcquireParams) (AcquireResult, error) {
	close(e.arrived)
	<-e.proceed
	res, _ := e.grantingEngine.Acquire(ctx, p)
	res.New = true
	return res, ctx.Err()
}

func (e *slowGrantEngine) Release(_ context.Context, p ReleaseParams) (bool, error) {
	e.released <- p
	return true, nil
}

// TestCancelledAttemptReleasesItsGrant: a TryLock or Lock whose context
// ends while its attempt is in flight lets the attempt finish and
// releases the new grant it made.
func TestCancelledAttemptReleasesItsGrant(t *testing.T) {
	t.Parallel()
	for _, waiting := range []bool{false, true} {
		e := &slowGrantEngine{arrived: make(chan struct{}), proceed: make(chan struct{}), released: make(chan ReleaseParams, 1)}
		s := NewStore(e, Options{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			var err error
			if waiting {
				_, err = s.Lock(ctx, "job", "bob", time.Minute)
			} else {
				_, _, err = s.TryLock(ctx, "job", "bob", time.Minute)
			}
			done <- err
		}()
		<-e.arrived
		cancel()
		close(e.proceed)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting %v: cancelled attempt = %v, want context.Canceled", waiting, err)
		}
		select {
		case p := <-e.released:
			if p.Name != "job" || p.Owner != "bob" || p.Token != 1 {
				t.Fatalf("waiting %v: released %+v, want job/bob token 1", waiting, p)
			}
		default:
			t.Fatalf("waiting %v: the grant made as the caller gave up was not released", waiting)
		}
	}
}
