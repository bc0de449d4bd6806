package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// blobs holds blobs and everything garbage collection keeps about them,
// under one mutex: a put and its pin, an arbitration's check and its
// delete, each happen atomically.
type blobs struct {
	e *Engine
	// mu guards every field below. Every method checks for Close while
	// holding it: Close drops values under mu, so a check made before
	// taking the lock could race it.
	mu     sync.RWMutex
	values map[blob.Key][]byte
	keys   []blob.Key // the keys of values, sorted, so a page costs its size
	pins   map[blob.Key]map[string]time.Time
	window map[blob.Key]time.Time
	// sources are the Go-function liveness sources.
	sources gc.FuncSources
	// lease is the sweep lease.
	lease gc.ProcessLease
}

func (b *blobs) Put(ctx context.Context, p blob.PutParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if p.Owner == "" { // the SQL engines' check constraint
		return fmt.Errorf("%w: empty pin owner", steaderr.ErrInvalidName)
	}
	if _, ok := b.values[p.Key]; !ok {
		b.values[p.Key] = bytes.Clone(p.Value)
		i, _ := slices.BinarySearchFunc(b.keys, p.Key, blob.Key.Compare)
		b.keys = slices.Insert(b.keys, i, p.Key)
	}
	b.pin(p.Key, p.Owner, clock.OrNow(p.Now).Add(p.TTL))
	return nil
}

// pin sets (key, owner)'s expiry to at least expiry. Called with mu held.
func (b *blobs) pin(key blob.Key, owner string, expiry time.Time) {
	owners := b.pins[key]
	if owners == nil {
		owners = map[string]time.Time{}
		b.pins[key] = owners
	}
	if old, ok := owners[owner]; !ok || expiry.After(old) {
		owners[owner] = expiry
	}
}

func (b *blobs) Pin(ctx context.Context, p blob.PinParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if _, ok := b.values[p.Key]; !ok {
		return steaderr.ErrNotFound
	}
	b.pin(p.Key, p.Owner, clock.OrNow(p.Now).Add(p.TTL))
	return nil
}

func (b *blobs) RenewPin(ctx context.Context, p blob.PinParams) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return false, err
	}
	now := clock.OrNow(p.Now)
	expiry, ok := b.pins[p.Key][p.Owner]
	if !ok || !expiry.After(now) {
		return false, nil
	}
	b.pin(p.Key, p.Owner, now.Add(p.TTL))
	return true, nil
}

func (b *blobs) Unpin(ctx context.Context, p blob.UnpinParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	b.unpin(p.Key, p.Owner)
	return nil
}

// unpin removes (key, owner). Called with mu held.
func (b *blobs) unpin(key blob.Key, owner string) {
	delete(b.pins[key], owner)
	if len(b.pins[key]) == 0 {
		delete(b.pins, key)
	}
}

func (b *blobs) Get(ctx context.Context, key blob.Key) ([]byte, error) {
	value, err := b.lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(value), nil
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	value, err := b.lookup(ctx, key)
	if err != nil {
		return blob.Info{}, err
	}
	return blob.Info{Key: key, Size: int64(len(value))}, nil
}

func (b *blobs) lookup(ctx context.Context, key blob.Key) ([]byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	value, ok := b.values[key]
	if !ok {
		return nil, steaderr.ErrNotFound
	}
	return value, nil
}

func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) error {
	if limit < 1 {
		return fmt.Errorf("%w: list limit %d, want at least 1", steaderr.ErrInvalidArgument, limit)
	}
	// The page is copied under the lock; yield runs without it.
	b.mu.RLock()
	if err := b.e.check(ctx); err != nil {
		b.mu.RUnlock()
		return err
	}
	start, found := slices.BinarySearchFunc(b.keys, after, blob.Key.Compare)
	if found {
		start++
	}
	keys := b.keys[start:]
	if len(keys) > limit {
		keys = keys[:limit]
	}
	snapshot := make([]blob.Info, len(keys))
	for i, key := range keys {
		snapshot[i] = blob.Info{Key: key, Size: int64(len(b.values[key]))}
	}
	b.mu.RUnlock()
	for _, info := range snapshot {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !yield(info) {
			return nil
		}
	}
	return nil
}

func (b *blobs) Delete(ctx context.Context, p blob.DeleteParams) error {
	v, err := b.arbitrate(ctx, p.Key, p.Now, false)
	if err != nil {
		return err
	}
	return v.Err()
}
