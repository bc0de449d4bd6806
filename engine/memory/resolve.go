package memory

import (
	"context"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// Resolve reads the ref and its blob under the read lock; a renewal due
// takes the write lock and resolves again, as a lazy Touch would judge it
// then.
func (m refMech) Resolve(ctx context.Context, p ref.ResolveParams) (ref.Ref, blob.Stored, error) {
	r, st, due, err := m.resolve(ctx, p, false)
	if err == nil && due {
		r, st, _, err = m.resolve(ctx, p, true)
	}
	return r, st, err
}

// resolve reads the live ref p.Name and its blob's stored form, and
// reports whether the ref is due a renewal; with renew it holds the
// write lock and renews a due ref.
func (m refMech) resolve(ctx context.Context, p ref.ResolveParams, renew bool) (ref.Ref, blob.Stored, bool, error) {
	b := m.b
	if renew {
		b.mu.Lock()
		defer b.mu.Unlock()
	} else {
		b.mu.RLock()
		defer b.mu.RUnlock()
	}
	if err := b.e.check(ctx); err != nil {
		return ref.Ref{}, blob.Stored{}, false, err
	}
	now := clock.OrNow(p.Now)
	r := b.liveRef(p.Name, now)
	if r == nil {
		return ref.Ref{}, blob.Stored{}, false, steaderr.ErrNotFound
	}
	st, ok := b.values[r.key]
	if !ok {
		return ref.Ref{}, blob.Stored{}, false, steaderr.ErrNotFound
	}
	due := p.TTL > 0 && !r.expiry.IsZero() && r.expiry.Sub(now) < p.TTL/2
	if due && renew {
		r.expiry, due = now.Add(p.TTL), false
	}
	return r.ref(p.Name), copyStored(st), due, nil
}
