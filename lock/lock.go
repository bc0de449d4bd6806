package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is a handle on one grant. It caches nothing about whether the grant
// is still held: Renew and Release ask the engine, conditioned on the exact
// grant (owner and token), so a stale handle never touches a newer grant,
// even one to the same owner. It is safe for concurrent use.
type Lock struct {
	s     *Store
	name  string
	owner string
	token int64

	mu     sync.Mutex
	expiry time.Time
	// deadline is when the lease is sure to still be live, in the Store's
	// local clock frame: the send time of the last grant or renewal plus
	// the time it had left then.
	deadline time.Time
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Owner returns the owner the lock was granted to.
func (l *Lock) Owner() string { return l.owner }

// Token returns the grant's fencing token.
func (l *Lock) Token() int64 { return l.token }

// Expiry returns the lease's expiry as of the grant or the last successful
// renewal, on the engine's clock.
func (l *Lock) Expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// Grant returns the grant as of the last successful renewal.
func (l *Lock) Grant() Grant {
	return Grant{Name: l.name, Owner: l.owner, Token: l.token, Expiry: l.Expiry()}
}

func (l *Lock) setExpiry(expiry, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry, l.deadline = expiry.UTC(), deadline
}

func (l *Lock) getDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Renew extends the lease to a full ttl from now. It returns false when
// the grant is no longer the lock's current one: released, or expired and
// taken by another grant. A grant that expired but was not taken is
// renewed.
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	ttl, err := checkTTL(ttl)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return false, fmt.Errorf("lock %q: renew: %w", l.name, err)
	}
	return l.renew(ctx, ttl)
}

func (l *Lock) renew(ctx context.Context, ttl time.Duration) (bool, error) {
	sent, now := l.s.clock()
	expiry, ok, err := l.s.eng.Renew(ctx, RenewParams{Name: l.name, Owner: l.owner, Token: l.token, TTL: ttl, Now: now})
	if err != nil {
		return false, fmt.Errorf("lock %q: renew: %w", l.name, err)
	}
	if ok {
		l.setExpiry(expiry, sent.Add(ttl))
	}
	return ok, nil
}

// Release frees the lock. It returns true when the grant was still the
// lock's current one (even past its expiry, if nobody took it since), and
// false when the lock was already released or taken by another grant.
func (l *Lock) Release(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("lock %q: release: %w", l.name, err)
	}
	ok, err := l.s.eng.Release(ctx, ReleaseParams{Name: l.name, Owner: l.owner, Token: l.token})
	if err != nil {
		return false, fmt.Errorf("lock %q: release: %w", l.name, err)
	}
	return ok, nil
}
