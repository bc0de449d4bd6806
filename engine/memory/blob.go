package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

type blobs struct {
	e *Engine
	// mu guards values and keys. Every method checks for Close while
	// holding it: Close drops values under mu, so a check made before
	// taking the lock could race it.
	mu     sync.RWMutex
	values map[blob.Key][]byte
	keys   []blob.Key // the keys of values, sorted, so a page costs its size
}

func (b *blobs) Put(ctx context.Context, key blob.Key, value []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if _, ok := b.values[key]; !ok {
		b.values[key] = bytes.Clone(value)
		i, _ := slices.BinarySearchFunc(b.keys, key, blob.Key.Compare)
		b.keys = slices.Insert(b.keys, i, key)
	}
	return nil
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

func (b *blobs) Delete(ctx context.Context, key blob.Key) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if _, ok := b.values[key]; !ok {
		return steaderr.ErrNotFound
	}
	delete(b.values, key)
	i, _ := slices.BinarySearchFunc(b.keys, key, blob.Key.Compare)
	b.keys = slices.Delete(b.keys, i, i+1)
	return nil
}
