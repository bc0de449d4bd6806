package remote

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/steaderr"
)

type locks struct{ e *Engine }

// grantCall posts a lock request; a 409 held or lost answer naming the
// lock is a refusal, returned with ok == false, not an error.
func (l *locks) grantCall(ctx context.Context, name, op string, in wire.LockRequest) (g wire.LockGrant, ok bool, err error) {
	resp, err := l.e.send(ctx, http.MethodPost, "/v1/locks/"+escape(name)+"/"+op, nil, in)
	if err != nil {
		return g, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		return g, false, errorOf(resp)
	}
	if err := decode(resp, &g); err != nil {
		return g, false, err
	}
	if resp.StatusCode == http.StatusConflict {
		// A refusal names its lock; an error answer of the server's
		// engine (one wrapping ErrLost too) is a plain wire.Error.
		if g.Name == "" || g.Code != wire.CodeHeld && g.Code != wire.CodeLost {
			return g, false, wire.Err(resp.StatusCode, wire.Error{Error: g.Error, Code: g.Code})
		}
		return g, false, nil
	}
	return g, true, nil
}

func (l *locks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	g, ok, err := l.grantCall(ctx, p.Name, "acquire", wire.LockRequest{Owner: p.Owner, TTL: wire.Duration(p.TTL), Now: p.Now})
	if err != nil {
		return lock.AcquireResult{}, err
	}
	res := lock.AcquireResult{Granted: ok, New: ok && g.New, Now: g.Now}
	if g.Token != 0 {
		res.Grant = lock.Grant{Name: p.Name, Owner: g.Owner, Token: g.Token, Expiry: g.Expiry}
	}
	return res, nil
}

func (l *locks) Renew(ctx context.Context, p lock.RenewParams) (time.Time, bool, error) {
	g, ok, err := l.grantCall(ctx, p.Name, "renew", wire.LockRequest{Owner: p.Owner, Token: p.Token, TTL: wire.Duration(p.TTL), Now: p.Now})
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return g.Expiry, true, nil
}

func (l *locks) Release(ctx context.Context, p lock.ReleaseParams) (bool, error) {
	_, ok, err := l.grantCall(ctx, p.Name, "release", wire.LockRequest{Owner: p.Owner, Token: p.Token})
	return ok, err
}

// WatchReleases is never live: the API has no release stream, so a
// waiting Lock polls.
func (l *locks) WatchReleases(ctx context.Context, name string) (<-chan struct{}, bool, func(), error) {
	if l.e.closed.Load() {
		return nil, false, func() {}, steaderr.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, false, func() {}, err
	}
	return nil, false, func() {}, nil
}

// ListHeld asks for at most lock.MaxList grants, the server's page bound.
func (l *locks) ListHeld(ctx context.Context, p lock.ListParams) ([]lock.Grant, error) {
	var out wire.HeldLocks
	q := query("prefix", p.Prefix, "after", p.After, "limit", strconv.Itoa(min(p.Limit, lock.MaxList)), "now", timeText(p.Now))
	if _, err := l.e.do(ctx, http.MethodGet, "/v1/locks", &request{query: q}, nil, &out); err != nil {
		return nil, err
	}
	grants := make([]lock.Grant, len(out.Locks))
	for i, g := range out.Locks {
		grants[i] = lock.Grant{Name: g.Name, Owner: g.Owner, Token: g.Token, Expiry: g.Expiry.UTC()}
	}
	return grants, nil
}
