package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// memRef is one stored ref.
type memRef struct {
	key        blob.Key
	version    int64
	annotation []byte
	expiry     time.Time // zero: none
	weak       bool
}

func (r *memRef) live(now time.Time) bool { return r.expiry.IsZero() || now.Before(r.expiry) }

// keeps reports whether r keeps its key at now: live and not weak.
func (r *memRef) keeps(now time.Time) bool { return !r.weak && r.live(now) }

func (r *memRef) ref(name string) ref.Ref {
	return ref.Ref{Name: name, Key: r.key, Version: r.version, Annotation: bytes.Clone(r.annotation), Expiry: r.expiry, Weak: r.weak}
}

// refMech is the engine's ref.Backend, over the blobs' state and mutex: a
// ref is set under the same lock an arbitration takes.
type refMech struct{ b *blobs }

var _ ref.Backend = refMech{}

// Refs implements engine.Engine.
func (e *Engine) Refs() ref.Backend { return refMech{&e.blobs} }

// liveRef returns the live ref name at now, or nil. Called with mu held.
func (b *blobs) liveRef(name string, now time.Time) *memRef {
	if r := b.refs[name]; r != nil && r.live(now) {
		return r
	}
	return nil
}

// dropRef removes the ref name, if any. Called with mu held.
func (b *blobs) dropRef(name string) {
	r := b.refs[name]
	if r == nil {
		return
	}
	delete(b.refs, name)
	delete(b.named[r.key], name)
	if len(b.named[r.key]) == 0 {
		delete(b.named, r.key)
	}
}

func (m refMech) Set(ctx context.Context, p ref.SetParams) (ref.Ref, error) {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	if _, ok := b.values[p.Key]; !ok {
		return ref.Ref{}, fmt.Errorf("%w: blob %s is not stored", steaderr.ErrNotFound, p.Key)
	}
	if err := b.setCond(p); err != nil {
		return ref.Ref{}, err
	}
	return b.set(p), nil
}

// setCond is why the Set p may not write: nil when its condition holds.
// Called with mu held.
func (b *blobs) setCond(p ref.SetParams) error {
	cur := b.liveRef(p.Name, clock.OrNow(p.Now))
	switch {
	case p.Cond == ref.IfAbsent && cur != nil:
		return fmt.Errorf("%w: a live ref has the name", steaderr.ErrConflict)
	case p.Cond == ref.IfVersion && (cur == nil || cur.version != p.Version):
		return fmt.Errorf("%w: the live ref's version is not %d", steaderr.ErrConflict, p.Version)
	}
	return nil
}

// set applies the Set p, its key stored and its condition checked (setCond).
// Called with mu held.
func (b *blobs) set(p ref.SetParams) ref.Ref {
	now := clock.OrNow(p.Now)
	cur := b.liveRef(p.Name, now)
	b.dropRef(p.Name)
	b.refVersion++
	created := cur == nil
	r := &memRef{key: p.Key, version: b.refVersion, annotation: bytes.Clone(p.Annotation), weak: p.Weak}
	if p.TTL > 0 {
		r.expiry = now.Add(p.TTL)
	}
	b.refs[p.Name] = r
	b.declared.Store(true)
	if b.named[p.Key] == nil {
		b.named[p.Key] = map[string]bool{}
	}
	b.named[p.Key][p.Name] = true
	out := r.ref(p.Name)
	out.Created = created
	return out
}

func (m refMech) Get(ctx context.Context, p ref.GetParams) (ref.Ref, error) {
	b := m.b
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	r := b.liveRef(p.Name, clock.OrNow(p.Now))
	if r == nil {
		return ref.Ref{}, steaderr.ErrNotFound
	}
	return r.ref(p.Name), nil
}

func (m refMech) Touch(ctx context.Context, p ref.TouchParams) (ref.Ref, error) {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	now := clock.OrNow(p.Now)
	r := b.liveRef(p.Name, now)
	if r == nil {
		return ref.Ref{}, steaderr.ErrNotFound
	}
	if !r.expiry.IsZero() && (!p.Lazy || r.expiry.Sub(now) < p.TTL/2) {
		r.expiry = now.Add(p.TTL)
	}
	return r.ref(p.Name), nil
}

func (m refMech) Delete(ctx context.Context, p ref.DeleteParams) error {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	r := b.liveRef(p.Name, clock.OrNow(p.Now))
	switch {
	case r == nil:
		return steaderr.ErrNotFound
	case p.Version != 0 && r.version != p.Version:
		return fmt.Errorf("%w: the live ref's version is not %d", steaderr.ErrConflict, p.Version)
	}
	b.dropRef(p.Name)
	return nil
}

func (m refMech) List(ctx context.Context, p ref.ListParams, yield func(ref.Ref) bool) error {
	if p.Limit < 1 {
		return fmt.Errorf("%w: list limit %d, want at least 1", steaderr.ErrInvalidArgument, p.Limit)
	}
	b := m.b
	b.mu.RLock()
	if err := b.e.check(ctx); err != nil {
		b.mu.RUnlock()
		return err
	}
	now := clock.OrNow(p.Now)
	var names []string
	for name, r := range b.refs {
		if strings.HasPrefix(name, p.Prefix) && name > p.After && r.live(now) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = names[:min(len(names), p.Limit)]
	page := make([]ref.Ref, len(names))
	for i, name := range names {
		page[i] = b.refs[name].ref(name)
	}
	b.mu.RUnlock()
	for _, r := range page {
		if !yield(r) {
			return nil
		}
	}
	return nil
}
