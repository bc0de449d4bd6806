package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
)

// gcMech is the engine's gc.Backend, over the blobs' state and mutex.
type gcMech struct{ b *blobs }

var _ gc.Backend = gcMech{}

// arbitrate decides keys in one critical section, so no put or pin
// interleaves: pins first, then every source, then the deletes.
func (b *blobs) arbitrate(ctx context.Context, keys []blob.Key, now time.Time, dry bool) ([]blob.Verdict, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	now = clock.OrNow(now)
	verdicts := make([]blob.Verdict, len(keys))
	var ask []blob.Key // stored and unpinned: for the sources
	for i, key := range keys {
		verdicts[i] = blob.Verdict{Key: key, Outcome: blob.Absent}
		if value, ok := b.values[key]; ok {
			verdicts[i] = blob.Verdict{Key: key, Outcome: blob.Deleted, Size: value.Size}
			if b.keptLocked(key, now) {
				verdicts[i] = blob.Verdict{Key: key, Outcome: blob.Protected}
			} else {
				ask = append(ask, key)
			}
		}
	}
	refs, err := b.sources.Referenced(ctx, ask)
	if err != nil {
		return nil, err
	}
	gone := map[blob.Key]bool{}
	for i, v := range verdicts {
		switch {
		case v.Outcome != blob.Deleted:
		case refs[v.Key]:
			verdicts[i] = blob.Verdict{Key: v.Key, Outcome: blob.Protected}
		default:
			gone[v.Key] = true
		}
	}
	if dry || len(gone) == 0 {
		return verdicts, nil
	}
	for key := range gone {
		delete(b.sets, b.values[key].Chunks)
		delete(b.values, key)
		delete(b.window, key)
		delete(b.pins, key) // all expired
		for name := range b.named[key] {
			b.dropRef(name) // expired or weak
		}
		b.dropEdges(key)
	}
	b.keys = slices.DeleteFunc(b.keys, func(k blob.Key) bool { return gone[k] })
	return verdicts, nil
}

// keptLocked reports whether key has a live pin or a live strong ref at
// now, or a parent. Called with mu held.
func (b *blobs) keptLocked(key blob.Key, now time.Time) bool {
	for _, expiry := range b.pins[key] {
		if expiry.After(now) {
			return true
		}
	}
	for name := range b.named[key] {
		if b.refs[name].keeps(now) {
			return true
		}
	}
	return len(b.parents[key]) > 0
}

func (g gcMech) Arbitrate(ctx context.Context, p gc.ArbitrateParams) ([]blob.Verdict, error) {
	return g.b.arbitrate(ctx, p.Keys, p.Now, p.DryRun)
}

func (g gcMech) Reap(ctx context.Context, p gc.NowParams) (gc.Reaped, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var r gc.Reaped
	if err := b.e.check(ctx); err != nil {
		return r, err
	}
	now := clock.OrNow(p.Now)
	for key, owners := range b.pins {
		for owner, expiry := range owners {
			if !expiry.After(now) {
				r.Pins++
				if !p.DryRun {
					b.unpin(key, owner)
				}
			}
		}
	}
	for name, ref := range b.refs {
		if !ref.live(now) {
			r.Refs++
			if !p.DryRun {
				b.dropRef(name)
			}
		}
	}
	return r, nil
}

func (g gcMech) Declared(ctx context.Context) (bool, error) {
	b := g.b
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return false, err
	}
	return b.declared.Load(), nil
}

func (g gcMech) Stage(ctx context.Context, p gc.StageParams) error {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	// A process lease released is lost: its Renew says so, without I/O.
	if p.Lease != nil {
		if err := p.Lease.Renew(ctx); err != nil {
			return err
		}
	}
	at := clock.OrNow(p.VisibleAfter)
	for _, key := range p.Keys {
		if _, stored := b.values[key]; stored {
			b.window[key] = at
		}
	}
	return nil
}

func (g gcMech) StagePass(ctx context.Context) (gc.Pass, error) {
	b := g.b
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return gc.Pass{}, err
	}
	return b.pass, nil
}

func (g gcMech) StageRange(ctx context.Context, p gc.StageRangeParams) (gc.StagedRange, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return gc.StagedRange{}, err
	}
	now := clock.OrNow(p.Now)
	start := 0
	if !p.After.IsZero() {
		i, found := slices.BinarySearchFunc(b.keys, p.After, blob.Key.Compare)
		if found {
			i++
		}
		start = i
	}
	keys := b.keys[start:min(len(b.keys), start+p.Limit)]
	var r gc.StagedRange
	r.Covered = int64(len(keys))
	if len(keys) == p.Limit {
		r.Last = keys[len(keys)-1]
	}
	var ask []blob.Key
	for _, key := range keys {
		if _, staged := b.window[key]; !staged && !b.keptLocked(key, now) {
			ask = append(ask, key)
		}
	}
	refs, err := b.sources.Referenced(ctx, ask)
	if err != nil {
		return gc.StagedRange{}, err
	}
	for _, key := range ask {
		if refs[key] {
			continue
		}
		r.Staged++
		if !p.DryRun {
			b.window[key] = now.Add(p.Grace)
		}
	}
	if !p.DryRun {
		if p.After.IsZero() {
			b.pass.Started = now
		}
		b.pass.After = r.Last
	}
	return r, nil
}

func (g gcMech) Take(ctx context.Context, p gc.TakeParams) ([]blob.Key, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	now := clock.OrNow(p.Now)
	var overdue []gc.Candidate
	for key, after := range b.window {
		if !after.After(now) {
			overdue = append(overdue, gc.Candidate{Key: key, VisibleAfter: after})
		}
	}
	// The longest overdue first, as the SQL engines' index gives them.
	slices.SortFunc(overdue, func(x, y gc.Candidate) int {
		return cmp.Or(x.VisibleAfter.Compare(y.VisibleAfter), x.Key.Compare(y.Key))
	})
	overdue = overdue[:min(len(overdue), p.Limit)]
	keys := make([]blob.Key, len(overdue))
	for i, c := range overdue {
		keys[i] = c.Key
		if !p.DryRun {
			delete(b.window, c.Key)
		}
	}
	slices.SortFunc(keys, blob.Key.Compare)
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
	if err := g.b.sources.Register("memory", src); err != nil {
		return err
	}
	g.b.declared.Store(true)
	return nil
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

func (g gcMech) Explain(ctx context.Context, p gc.ExplainParams) (gc.Explanation, error) {
	key, now := p.Key, p.Now
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
	for _, name := range slices.Sorted(maps.Keys(b.named[key])) {
		x.Refs = append(x.Refs, gc.RefInfo{Name: name, Expiry: b.refs[name].expiry, Weak: b.refs[name].weak})
	}
	x.Parents = slices.SortedFunc(maps.Keys(b.parents[key]), blob.Key.Compare)
	x.VisibleAfter, x.Staged = b.window[key]
	return x, nil
}

func (g gcMech) Pins(ctx context.Context, _ gc.PinsParams, yield func(gc.PinInfo) bool) error {
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

// Stored counts under the read lock, in one pass over the blobs.
func (g gcMech) Stored(ctx context.Context) (gc.Stored, error) {
	b := g.b
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return gc.Stored{}, err
	}
	var st gc.Stored
	for _, v := range b.values {
		st.Blobs++
		st.Bytes += v.Size
	}
	for key := range b.window {
		if v, ok := b.values[key]; ok {
			st.PendingBlobs++
			st.PendingBytes += v.Size
		}
	}
	return st, nil
}
