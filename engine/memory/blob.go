package memory

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

type blobs struct {
	e *Engine
	// mu guards every field below. Every method checks for Close while
	// holding it: Close drops the maps under mu, so a check made before
	// taking the lock could race it.
	mu      sync.RWMutex
	values  map[blob.Key]blob.Stored
	keys    []blob.Key // the keys of values, sorted, so a page costs its size
	uploads map[blob.ChunkSet]*upload
	sets    map[blob.ChunkSet][]chunk // published chunk sets
	lastSet blob.ChunkSet
}

// upload is a chunk set being staged.
type upload struct {
	expires time.Time
	chunks  []chunk
}

// chunk is one stored chunk; a set's chunks are in offset order.
type chunk struct {
	off  int64
	data []byte
}

func (b *blobs) Put(ctx context.Context, key blob.Key, value []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	b.insert(key, blob.Stored{Size: int64(len(value)), Value: bytes.Clone(value)})
	return nil
}

// insert stores st under key unless key is stored already, and reports
// whether it did. b.mu is held.
func (b *blobs) insert(key blob.Key, st blob.Stored) bool {
	if _, ok := b.values[key]; ok {
		return false
	}
	b.values[key] = st
	i, _ := slices.BinarySearchFunc(b.keys, key, blob.Key.Compare)
	b.keys = slices.Insert(b.keys, i, key)
	return true
}

func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	st, err := b.lookup(ctx, key)
	if err != nil {
		return blob.Stored{}, err
	}
	st.Value = bytes.Clone(st.Value)
	if st.Chunks == 0 && st.Value == nil {
		st.Value = []byte{}
	}
	return st, nil
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	st, err := b.lookup(ctx, key)
	if err != nil {
		return blob.Info{}, err
	}
	return blob.Info{Key: key, Size: st.Size}, nil
}

func (b *blobs) lookup(ctx context.Context, key blob.Key) (blob.Stored, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return blob.Stored{}, err
	}
	st, ok := b.values[key]
	if !ok {
		return blob.Stored{}, steaderr.ErrNotFound
	}
	return st, nil
}

func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) error {
	// The snapshot is taken under the lock; yield runs without it, so it
	// may call back into the engine.
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
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	snapshot := make([]blob.Info, len(keys))
	for i, key := range keys {
		snapshot[i] = blob.Info{Key: key, Size: b.values[key].Size}
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
	st, ok := b.values[key]
	if !ok {
		return steaderr.ErrNotFound
	}
	delete(b.values, key)
	delete(b.sets, st.Chunks)
	i, _ := slices.BinarySearchFunc(b.keys, key, blob.Key.Compare)
	b.keys = slices.Delete(b.keys, i, i+1)
	return nil
}

func (b *blobs) BeginUpload(ctx context.Context) (blob.ChunkSet, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	b.lastSet++
	return b.lastSet, nil
}

func (b *blobs) WriteChunk(ctx context.Context, set blob.ChunkSet, off int64, data []byte, lease time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	u, ok := b.uploads[set]
	switch {
	case off == 0 && !ok:
		u = &upload{}
		b.uploads[set] = u
	case !ok:
		return steaderr.ErrLost
	}
	u.expires = time.Now().Add(lease)
	u.chunks = append(u.chunks, chunk{off: off, data: bytes.Clone(data)})
	return nil
}

func (b *blobs) Publish(ctx context.Context, set blob.ChunkSet, key blob.Key, size int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	u, ok := b.uploads[set]
	if !ok {
		return steaderr.ErrLost
	}
	delete(b.uploads, set)
	if b.insert(key, blob.Stored{Size: size, Chunks: set}) {
		b.sets[set] = u.chunks
	}
	return nil
}

func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	delete(b.uploads, set)
	return nil
}

func (b *blobs) ReapUploads(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	now, n := time.Now(), 0
	for set, u := range b.uploads {
		if !now.Before(u.expires) {
			delete(b.uploads, set)
			n++
		}
	}
	return n, nil
}

func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (int64, []byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return 0, nil, err
	}
	chunks, ok := b.sets[set]
	if !ok {
		return 0, nil, steaderr.ErrNotFound
	}
	// The chunk holding off is the last one starting at or before it.
	i, found := slices.BinarySearchFunc(chunks, off, func(c chunk, off int64) int { return cmpInt(c.off, off) })
	if !found {
		i--
	}
	if i < 0 {
		return 0, nil, steaderr.ErrNotFound
	}
	return chunks[i].off, bytes.Clone(chunks[i].data), nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
