package lock

import (
	"context"
	"time"
)

// Backend is what a storage engine does for named locks: mechanics only.
// The portable Store validates every argument before calling it: names and
// owners follow the name rules, TTLs are positive whole microseconds, and
// Now, when set, is a whole microsecond. Every method returns
// steaderr.ErrClosed once the engine is closed.
//
// A lock is free when its name was never granted, was released, or its
// grant has expired: a grant is expired at exactly its expiry instant
// (expiry <= now). Each name has a token counter that survives release and
// expiry; every new grant takes the next value, so tokens are strictly
// increasing per name in grant order, and never repeat once a grant has
// returned.
type Backend interface {
	// Acquire grants p.Name to p.Owner when it is free at p.Now, with the
	// name's next token and expiry p.Now + p.TTL. When p.Owner already holds
	// the live grant, that grant is returned unchanged (same token, same
	// expiry) and granted. Otherwise nothing changes and the result is not
	// granted. Deciding, minting the token and recording the grant happen
	// in one atomic step, durable when Acquire returns.
	Acquire(ctx context.Context, p AcquireParams) (AcquireResult, error)
	// Renew sets the expiry of the grant (p.Name, p.Owner, p.Token) to
	// p.Now + p.TTL and returns it, when that grant is still the name's
	// current one, even past its expiry; otherwise it returns false and
	// changes nothing.
	Renew(ctx context.Context, p RenewParams) (expiry time.Time, ok bool, err error)
	// Release frees p.Name when (p.Name, p.Owner, p.Token) is its current
	// grant, even past its expiry, and reports whether it did. Once it
	// commits it wakes the name's watchers (WatchReleases) if a waiting
	// Acquire (AcquireParams.Wait) was refused while the grant was live.
	Release(ctx context.Context, p ReleaseParams) (bool, error)
	// WatchReleases returns a channel that may receive a value after a
	// release of name, or when nothing was released. live reports that
	// every release committing after WatchReleases returns, by any
	// process, will send on it; otherwise (an engine that cannot see every
	// release, or one not listening yet) the Store polls, and the channel,
	// possibly nil, only hurries it. stop ends the watch and is never nil.
	WatchReleases(ctx context.Context, name string) (released <-chan struct{}, live bool, stop func(), err error)
	// ListHeld returns up to p.Limit grants live at p.Now, those of names
	// that start with p.Prefix and sort after p.After (bytewise; "": from
	// the first), in name order, from one snapshot. The prefix is literal:
	// no character in it is a pattern. p.Limit is at least one.
	ListHeld(ctx context.Context, p ListParams) ([]Grant, error)
}

// AcquireParams are the arguments of Backend.Acquire.
type AcquireParams struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Now is the time expiry is judged at and the TTL runs from. Zero means
	// the engine's clock: the database's now() on PostgreSQL, the system
	// clock elsewhere.
	Now time.Time
	// Wait says the caller, if refused, will wait for a release: the next
	// release of the name must then wake WatchReleases' channels. Without
	// it an engine may leave releases unsignalled, which PostgreSQL does
	// when nobody waits: a NOTIFY serializes commits.
	Wait bool
}

// AcquireResult is the outcome of Backend.Acquire.
type AcquireResult struct {
	// Granted reports whether p.Owner holds the lock.
	Granted bool
	// New is true when this call granted a new token, false when p.Owner
	// already held the lock and got its grant back unchanged (and when
	// not granted).
	New bool
	// Grant is p.Owner's grant when Granted. Otherwise it is the live
	// holder's grant as far as the engine could read it, or zero when it
	// could not: a hint for how long to wait, never a basis for a decision.
	Grant Grant
	// Now is the time the attempt was judged at: p.Now, or the engine
	// clock's reading (zero when not granted and no holder was read).
	Now time.Time
}

// RenewParams are the arguments of Backend.Renew.
type RenewParams struct {
	Name  string
	Owner string
	Token int64
	TTL   time.Duration
	// Now is as in AcquireParams.
	Now time.Time
}

// ListParams are the arguments of Backend.ListHeld.
type ListParams struct {
	Prefix, After string
	Limit         int
	// Now is as in AcquireParams.
	Now time.Time
}

// ReleaseParams are the arguments of Backend.Release.
type ReleaseParams struct {
	Name  string
	Owner string
	Token int64
}
