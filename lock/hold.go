package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/steadkit/stead/steaderr"
)

// Held is a lock that a background goroutine keeps renewed, every third of
// its TTL, until Release. When a renewal fails, is refused, or would come
// too late (the lease may have lapsed before it landed), the lock counts as
// lost: Lost is closed at that moment and renewal stops.
type Held struct {
	lk  *Lock
	ttl time.Duration
	// ctx is cancelled by Release, which stops the renewer.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the renewer has returned
	lost   chan struct{}
	err    error // why the lock was lost; written before lost is closed

	stop sync.Once // stops the renewer, on the first Release

	mu         sync.Mutex
	released   bool // the release reached the engine; releaseErr is final
	releaseErr error
}

// Hold waits like Lock until name is granted to owner for ttl, then keeps
// the lock renewed in the background until Release. ctx bounds the wait
// only; renewal goes on until Release, so always call it.
func (s *Store) Hold(ctx context.Context, name, owner string, ttl time.Duration) (*Held, error) {
	lk, err := s.Lock(ctx, name, owner, ttl)
	if err != nil {
		return nil, err
	}
	return lk.hold(ctx, ttl), nil
}

// TryHold is Hold without the wait: on contention it returns nil, false,
// nil, like TryLock.
func (s *Store) TryHold(ctx context.Context, name, owner string, ttl time.Duration) (*Held, bool, error) {
	lk, ok, err := s.TryLock(ctx, name, owner, ttl)
	if !ok {
		return nil, false, err
	}
	return lk.hold(ctx, ttl), true, nil
}

// hold starts renewing l for ttl, the (valid) TTL it was granted for.
func (l *Lock) hold(ctx context.Context, ttl time.Duration) *Held {
	h := &Held{lk: l, ttl: ttl.Truncate(time.Microsecond), done: make(chan struct{}), lost: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go h.run()
	return h
}

// Grant returns the grant as of the last successful renewal.
func (h *Held) Grant() Grant { return h.lk.Grant() }

// Lost returns a channel that is closed when the lock is lost before
// Release. Work that needs the lock must stop when it closes.
func (h *Held) Lost() <-chan struct{} { return h.lost }

// Err returns why the lock was lost (an error wrapping steaderr.ErrLost),
// or nil while it is held.
func (h *Held) Err() error {
	select {
	case <-h.lost:
		return h.err
	default:
		return nil
	}
}

// Release stops renewing and releases the lock. It returns an error
// wrapping steaderr.ErrLost when the lock was lost at any point, even if
// the release itself found the grant still current; the cause of the loss
// is in the message, not the chain (Err has it). A call that could not
// reach the engine (ctx ended, the database unreachable: its error wraps
// that cause) releases nothing and may be retried; once a release ran,
// later calls return its result.
// Renewal stops with the first call either way, so in a defer pass a
// context that outlives the work, such as context.WithoutCancel(ctx).
func (h *Held) Release(ctx context.Context) error {
	h.stop.Do(func() {
		h.cancel()
		<-h.done
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.releaseErr
	}
	ok, err := h.lk.Release(ctx)
	lost := h.Err()
	if lost != nil {
		// The loss's cause is told, not wrapped: only a release that did
		// not run wraps ErrUnavailable, so a caller retries exactly those.
		lost = fmt.Errorf("lock %q: %w (%v)", h.lk.name, steaderr.ErrLost, lost)
	}
	switch {
	case err != nil: // the release did not run: it may be retried
		return errors.Join(lost, err)
	case lost != nil:
		h.releaseErr = lost
	case !ok:
		h.releaseErr = fmt.Errorf("lock %q: %w: released or taken by another grant", h.lk.name, steaderr.ErrLost)
	}
	h.released = true
	return h.releaseErr
}

func (h *Held) run() {
	defer close(h.done)
	for {
		// Renew when two thirds of the TTL are left: a third of the TTL
		// after the last grant or renewal was sent.
		sent, _ := h.lk.s.clock()
		timer := time.NewTimer(h.lk.getDeadline().Add(-2 * h.ttl / 3).Sub(sent))
		select {
		case <-h.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if err := h.renew(); err != nil {
			// A renewal cut short by Release is no loss; a refused or late
			// one is, even if Release came meanwhile.
			if h.ctx.Err() == nil || !errors.Is(err, context.Canceled) {
				h.err = err
				close(h.lost)
			}
			return
		}
	}
}

// renew renews the lease once; an error (wrapping steaderr.ErrLost) means
// the lock is lost.
func (h *Held) renew() error {
	deadline := h.lk.getDeadline()
	if sent, _ := h.lk.s.clock(); !sent.Before(deadline) {
		return fmt.Errorf("%w: the lease lapsed before it was renewed", steaderr.ErrLost)
	}
	ctx, cancel := h.ctx, context.CancelFunc(func() {})
	if h.lk.s.now == nil {
		// On the system clock, a renewal still running at the deadline is
		// lost at that moment. An injected clock is checked afterwards.
		ctx, cancel = context.WithDeadline(h.ctx, deadline)
	}
	defer cancel()
	ok, err := h.lk.renew(ctx, h.ttl)
	switch {
	case err != nil:
		return fmt.Errorf("%w: renewal failed: %w", steaderr.ErrLost, err)
	case !ok:
		return fmt.Errorf("%w: released or taken by another grant", steaderr.ErrLost)
	}
	if done, _ := h.lk.s.clock(); !done.Before(deadline) {
		return fmt.Errorf("%w: renewed after the lease may have lapsed", steaderr.ErrLost)
	}
	return nil
}
