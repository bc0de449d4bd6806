package memory

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
)

// gcMech is the engine's gc.Engine, over the blobs' state and mutex.
type gcMech struct{ b *blobs }

var _ gc.Engine = gcMech{}

// arbitrate decides key under the mutex, so no put or pin interleaves:
// pins first, then every source, then the delete.
func (b *blobs) arbitrate(ctx context.Context, key blob.Key, now time.Time, dry bool) (gc.Verdict, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return gc.Verdict{}, err
	}
	value, ok := b.values[key]
	if !ok {
		return gc.Verdict{Outcome: gc.Absent}, nil
	}
	if b.pinnedLocked(key, clock.OrNow(now)) {
		return gc.Verdict{Outcome: gc.Protected}, nil
	}
	refs, err := b.sources.References(ctx, key, true)
	if err != nil {
		return gc.Verdict{}, err
	}
	if len(refs) > 0 {
		return gc.Verdict{Outcome: gc.Protected}, nil
	}
	v := gc.Verdict{Outcome: gc.Deleted, Size: value.Size}
	if dry {
		return v, nil
	}
	delete(b.values, key)
	delete(b.sets, value.Chunks)
	delete(b.window, key)
	delete(b.pins, key) // all expired
	i, _ := slices.BinarySearchFunc(b.keys, key, blob.Key.Compare)
	b.keys = slices.Delete(b.keys, i, i+1)
	return v, nil
}

// pinnedLocked reports whether key has a live pin at now.
func (b *blobs) pinnedLocked(key blob.Key, now time.Time) bool {
	for _, expiry := range b.pins[key] {
		if expiry.After(now) {
			return true
		}
	}
	return false
}

func (g gcMech) Arbitrate(ctx context.Context, p gc.ArbitrateParams) (gc.Verdict, error) {
	return g.b.arbitrate(ctx, p.Key, p.Now, p.DryRun)
}

func (g gcMech) ReapPins(ctx context.Context, p gc.NowParams) (int64, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	now := clock.OrNow(p.Now)
	var n int64
	for key, owners := range b.pins {
		for owner, expiry := range owners {
			if !expiry.After(now) {
				n++
				if !p.DryRun {
					b.unpin(key, owner)
				}
			}
		}
	}
	return n, nil
}

func (g gcMech) Stage(ctx context.Context, key blob.Key, visibleAfter time.Time) error {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	b.window[key] = visibleAfter
	return nil
}

func (g gcMech) StageUnreferenced(ctx context.Context, p gc.StageParams) (int64, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	now := clock.OrNow(p.Now)
	var n int64
	for _, key := range b.keys {
		if _, staged := b.window[key]; staged || b.pinnedLocked(key, now) {
			continue
		}
		refs, err := b.sources.References(ctx, key, true)
		if err != nil {
			return n, err
		}
		if len(refs) > 0 {
			continue
		}
		n++
		if !p.DryRun {
			b.window[key] = now.Add(p.Grace)
		}
	}
	return n, nil
}

func (g gcMech) Take(ctx context.Context, p gc.TakeParams) ([]blob.Key, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	now := clock.OrNow(p.Now)
	var keys []blob.Key
	for key, after := range b.window {
		if !after.After(now) {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, blob.Key.Compare)
	if p.Limit > 0 && len(keys) > p.Limit {
		keys = keys[:p.Limit]
	}
	if !p.DryRun {
		for _, key := range keys {
			delete(b.window, key)
		}
	}
	return keys, nil
}

func (g gcMech) AcquireSweep(ctx context.Context, holder string) (gc.Lease, bool, error) {
	if err := g.b.e.check(ctx); err != nil {
		return nil, false, err
	}
	lease, ok := g.b.lease.TryAcquire()
	return lease, ok, nil
}

// RegisterSource accepts Go-function sources; SQL sources need a database.
func (g gcMech) RegisterSource(ctx context.Context, src gc.Source) error {
	if err := g.b.e.check(ctx); err != nil {
		return err
	}
	return g.b.sources.Register("memory", src)
}

func (g gcMech) UnregisterSource(ctx context.Context, src gc.Source) error {
	if err := g.b.e.check(ctx); err != nil {
		return err
	}
	g.b.sources.Unregister(src)
	return nil
}

func (g gcMech) Sources(ctx context.Context) ([]gc.Source, error) {
	if err := g.b.e.check(ctx); err != nil {
		return nil, err
	}
	return g.b.sources.List(), nil
}

func (g gcMech) Explain(ctx context.Context, key blob.Key, now time.Time) (gc.Explanation, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return gc.Explanation{}, err
	}
	x := gc.Explanation{Key: key, Now: clock.OrNow(now)}
	if v, ok := b.values[key]; ok {
		x.Stored, x.Size = true, v.Size
	}
	for _, owner := range slices.Sorted(maps.Keys(b.pins[key])) {
		x.Pins = append(x.Pins, gc.PinInfo{Key: key, Owner: owner, Expiry: b.pins[key][owner]})
	}
	refs, err := b.sources.References(ctx, key, false)
	if err != nil {
		return gc.Explanation{}, err
	}
	x.Sources = refs
	x.VisibleAfter, x.Staged = b.window[key]
	return x, nil
}

func (g gcMech) Pins(ctx context.Context, yield func(gc.PinInfo) bool) error {
	b := g.b
	b.mu.RLock()
	if err := b.e.check(ctx); err != nil {
		b.mu.RUnlock()
		return err
	}
	var all []gc.PinInfo
	for _, key := range slices.SortedFunc(maps.Keys(b.pins), blob.Key.Compare) {
		for _, owner := range slices.Sorted(maps.Keys(b.pins[key])) {
			all = append(all, gc.PinInfo{Key: key, Owner: owner, Expiry: b.pins[key][owner]})
		}
	}
	b.mu.RUnlock()
	for _, p := range all {
		if !yield(p) {
			return nil
		}
	}
	return nil
}

func (g gcMech) Window(ctx context.Context, yield func(gc.Candidate) bool) error {
	b := g.b
	b.mu.RLock()
	if err := b.e.check(ctx); err != nil {
		b.mu.RUnlock()
		return err
	}
	var all []gc.Candidate
	for _, key := range slices.SortedFunc(maps.Keys(b.window), blob.Key.Compare) {
		all = append(all, gc.Candidate{Key: key, VisibleAfter: b.window[key]})
	}
	b.mu.RUnlock()
	for _, c := range all {
		if !yield(c) {
			return nil
		}
	}
	return nil
}
