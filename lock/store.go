// Package lock holds the portable named-lock layer: TTL leases with fencing
// tokens over a Backend's mechanics, validation, and the waiting and
// renewal policy of Lock and Hold.
//
// Names and owners are 1 to 255 bytes of valid UTF-8 holding no control
// characters, compared bytewise; anything else is refused with an error
// wrapping steaderr.ErrInvalidName. TTLs are truncated to whole
// microseconds and must be at least one (steaderr.ErrInvalidArgument).
//
// A grant's token is strictly increasing per name in grant order, so a
// resource that remembers the largest token it accepted can refuse the
// writes of a holder whose lease lapsed.
package lock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/internal/wake"
	"github.com/steadkit/stead/steaderr"
)

// Grant is one grant of a named lock.
type Grant struct {
	// Name is the lock's name.
	Name string
	// Owner is the holder the lock was granted to.
	Owner string
	// Token is the grant's fencing token: larger than every earlier grant's
	// for Name.
	Token int64
	// Expiry is when the lease lapses unless renewed, on the engine's
	// clock (the database's, on PostgreSQL).
	Expiry time.Time
}

// Options configures a Store.
type Options struct {
	// Now is the clock leases are measured against, for tests that move
	// time without sleeping. Defaults to nil: the engine's clock (the
	// database's now() on PostgreSQL, the system clock elsewhere).
	Now func() time.Time
}

// Store is the lock capability of a stead store. It is safe for concurrent
// use.
type Store struct {
	eng Backend
	now func() time.Time
}

// NewStore returns a Store over eng.
func NewStore(eng Backend, opts Options) *Store {
	return &Store{eng: eng, now: opts.Now}
}

// TryLock grants the lock name to owner for ttl if it is free. Contention
// is not an error: it returns nil, false, nil. When owner already holds the
// live grant, that grant is returned again with its token and expiry
// unchanged (use Renew to extend it).
func (s *Store) TryLock(ctx context.Context, name, owner string, ttl time.Duration) (*Lock, bool, error) {
	ttl, err := check(ctx, name, owner, ttl)
	if err != nil {
		return nil, false, err
	}
	lk, _, err := s.acquire(ctx, name, owner, ttl, false)
	return lk, lk != nil, err
}

// Lock waits until the lock name is granted to owner for ttl, or ctx ends.
// On PostgreSQL a release wakes waiters at once; otherwise waiters retry
// with capped exponential backoff. Either way a waiter also retries when the
// holder's lease is due to lapse.
func (s *Store) Lock(ctx context.Context, name, owner string, ttl time.Duration) (*Lock, error) {
	ttl, err := check(ctx, name, owner, ttl)
	if err != nil {
		return nil, err
	}
	var b backoff
	for {
		// Watch before trying: a release after the attempt wakes us.
		released, live, stop, err := s.eng.WatchReleases(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("lock %q: %w", name, err)
		}
		lk, res, err := s.acquire(ctx, name, owner, ttl, live)
		if lk != nil || err != nil {
			stop()
			return lk, err
		}
		wait := b.next()
		if res.Grant.Token != 0 {
			left := max(res.Grant.Expiry.Sub(res.Now), 0)
			// When every release is signalled and leases run on the
			// engine's clock, the only other reason to retry is the
			// holder's expiry. An injected clock may jump at any moment,
			// so it is polled.
			if live && s.now == nil {
				wait = left
			} else {
				wait = min(wait, left)
			}
		}
		err = wake.Sleep(ctx, released, wait)
		stop()
		if err != nil {
			return nil, fmt.Errorf("lock %q: %w", name, err)
		}
	}
}

// MaxList is the most grants one ListHeld call returns.
const MaxList = 1000

// ListHeld returns up to limit grants live now (not released, not
// expired: a grant is expired at exactly its expiry) of the locks whose
// names start with prefix, literally, and sort after after (bytewise), in
// name order: pass the last name of one page as after to get the next.
// Prefix and after are "" or follow the name rules (ErrInvalidName);
// limit is 1 to MaxList (ErrInvalidArgument).
func (s *Store) ListHeld(ctx context.Context, prefix, after string, limit int) ([]Grant, error) {
	var err error
	for _, n := range []struct{ what, name string }{{"lock prefix", prefix}, {"lock cursor", after}} {
		if err == nil && n.name != "" {
			err = validate.Name(n.what, n.name)
		}
	}
	if err == nil && (limit < 1 || limit > MaxList) {
		err = fmt.Errorf("%w: limit %d, want 1 to %d", steaderr.ErrInvalidArgument, limit, MaxList)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("lock list: %w", err)
	}
	_, now := s.clock()
	grants, err := s.eng.ListHeld(ctx, ListParams{Prefix: prefix, After: after, Limit: limit, Now: now})
	if err != nil {
		return nil, fmt.Errorf("lock list: %w", err)
	}
	return grants, nil
}

// check validates the arguments of a grant and ctx, and returns ttl
// truncated to whole microseconds.
func check(ctx context.Context, name, owner string, ttl time.Duration) (time.Duration, error) {
	ttl, err := CheckAcquire(name, owner, ttl)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("lock %q: %w", name, err)
	}
	return ttl, nil
}

// CheckAcquire checks the arguments of an acquire or a renewal as every
// Store call does, and returns ttl truncated to whole microseconds: name
// and owner as in CheckRelease, ttl at least 1µs once truncated (an error
// wrapping steaderr.ErrInvalidArgument). Adapters that call a Backend
// directly (the HTTP server) use it so they refuse what a Store refuses.
func CheckAcquire(name, owner string, ttl time.Duration) (time.Duration, error) {
	if err := CheckRelease(name, owner); err != nil {
		return 0, err
	}
	ttl, err := checkTTL(ttl)
	if err != nil {
		return 0, fmt.Errorf("lock %q: %w", name, err)
	}
	return ttl, nil
}

// CheckRelease checks the name and owner of a grant: each 1 to 255 bytes
// of valid UTF-8 without control characters, else an error wrapping
// steaderr.ErrInvalidName.
func CheckRelease(name, owner string) error {
	if err := validate.Name("lock name", name); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := validate.Name("lock owner", owner); err != nil {
		return fmt.Errorf("lock %q: %w", name, err)
	}
	return nil
}

func checkTTL(ttl time.Duration) (time.Duration, error) {
	if t := ttl.Truncate(time.Microsecond); t > 0 {
		return t, nil
	}
	return 0, fmt.Errorf("%w: ttl %v: want at least 1µs", steaderr.ErrInvalidArgument, ttl)
}

// attemptGrace bounds how long an attempt outlives its caller's context.
const attemptGrace = 5 * time.Second

// acquire makes one attempt; it returns a handle only when granted. An
// attempt cut off mid-statement may still take effect, leaving a grant
// whose token nobody knows until it lapses; so ctx does not cut it off
// (it may run attemptGrace past ctx's end), and a new grant it brings
// back after ctx ended is released before acquire returns ctx's error.
func (s *Store) acquire(ctx context.Context, name, owner string, ttl time.Duration, wait bool) (*Lock, AcquireResult, error) {
	sent, now := s.clock()
	actx, stop := detach(ctx, attemptGrace)
	res, err := s.eng.Acquire(actx, AcquireParams{Name: name, Owner: owner, TTL: ttl, Now: now, Wait: wait})
	stop()
	if cerr := ctx.Err(); cerr != nil {
		if err == nil && res.Granted && res.New {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptGrace)
			_, _ = s.eng.Release(rctx, ReleaseParams{Name: name, Owner: owner, Token: res.Grant.Token})
			cancel()
		}
		return nil, AcquireResult{}, fmt.Errorf("lock %q: %w", name, cerr)
	}
	if err != nil || !res.Granted {
		if err != nil {
			err = fmt.Errorf("lock %q: %w", name, err)
		}
		return nil, res, err
	}
	lk := &Lock{s: s, name: name, owner: owner, token: res.Grant.Token}
	// A re-acquired grant may have less than ttl left.
	lk.setExpiry(res.Grant.Expiry, sent.Add(res.Grant.Expiry.Sub(res.Now)))
	return lk, res, nil
}

// detach returns a context with ctx's values that ends grace after ctx
// does, and a function that releases it: ctx itself, should it never end.
func detach(ctx context.Context, grace time.Duration) (context.Context, func()) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return dctx, func() { stop(); cancel() }
}

// clock returns the time a request is sent, in the frame deadlines are
// kept in (the injected clock, else the system clock with its monotonic
// reading), and the Now to pass to the engine (zero: the engine's clock).
func (s *Store) clock() (sent, now time.Time) {
	if s.now == nil {
		return time.Now(), time.Time{}
	}
	now = s.now().Truncate(time.Microsecond)
	return now, now
}

// Backoff bounds for Lock's retries when it cannot be told of releases.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// backoff yields exponentially growing waits, capped at maxBackoff, each
// drawn uniformly from its upper half so that waiters spread out.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, minBackoff), maxBackoff)
	return b.d/2 + rand.N(b.d/2+1)
}
