package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/chunkid"
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
	// holding it: Close drops the maps under mu, so a check made before
	// taking the lock could race it.
	mu      sync.RWMutex
	values  map[blob.Key]blob.Stored
	keys    []blob.Key // the keys of values, sorted, so a page costs its size
	uploads map[blob.ChunkSet]*upload
	sets    map[blob.ChunkSet][]chunk // published chunk sets
	pins    map[blob.Key]map[string]time.Time
	window  map[blob.Key]time.Time
	// pass is the staging pass's cursor.
	pass gc.Pass
	// refs are the refs by name, named the names of the refs naming each
	// key, and refVersion the last version handed out.
	refs       map[string]*memRef
	named      map[blob.Key]map[string]bool
	refVersion int64
	// children are each parent's edges, parents each child's.
	children map[blob.Key][]blob.Key
	parents  map[blob.Key]map[blob.Key]bool
	// sources are the Go-function liveness sources.
	sources gc.FuncSources
	// declared is set once a ref, an edge or a source declared liveness
	// (gc.Backend.Declared), and stays set.
	declared atomic.Bool
	// lease is the sweep lease.
	lease gc.ProcessLease
}

// upload is a chunk set being staged: who may continue it, what its
// chunks hold and the state recorded with the last of them.
type upload struct {
	owner   string
	size    int64
	state   []byte
	expires time.Time
	chunks  []chunk
}

// chunk is one stored chunk; a set's chunks are in offset order.
type chunk struct {
	off  int64
	data []byte
}

func (b *blobs) Put(ctx context.Context, p blob.PutParams) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return false, err
	}
	return b.put(p)
}

// put is Put, called with mu held.
func (b *blobs) put(p blob.PutParams) (bool, error) {
	if p.Owner == "" { // the SQL engines' check constraint
		return false, fmt.Errorf("%w: empty pin owner", steaderr.ErrInvalidName)
	}
	var missing []string
	for _, c := range p.Children {
		if _, ok := b.values[c]; !ok {
			missing = append(missing, c.String())
		}
	}
	if len(missing) > 0 {
		return false, fmt.Errorf("%w: children not stored: %s", steaderr.ErrNotFound, strings.Join(missing, ", "))
	}
	if _, stored := b.values[p.Key]; stored {
		var extra []string
		for _, c := range p.Children {
			if !b.parents[c][p.Key] {
				extra = append(extra, c.String())
			}
		}
		if len(extra) > 0 {
			return false, blob.ChildrenFixedError(p.Key.String(), extra)
		}
	}
	var created bool
	if p.Chunks != 0 {
		u, ok := b.uploads[p.Chunks]
		if !ok {
			return false, lostUpload(p.Chunks)
		}
		if u.size != p.Size {
			return false, fmt.Errorf("%w: upload %d holds %d bytes, not %d (another writer appended)", steaderr.ErrConflict, p.Chunks, u.size, p.Size)
		}
		if !tiles(u.chunks, p.Size) {
			return false, fmt.Errorf("%w: the staged chunks of set %d do not cover %d bytes exactly, each once", steaderr.ErrInvalidArgument, p.Chunks, p.Size)
		}
		delete(b.uploads, p.Chunks)
		if created = b.insert(p.Key, blob.Stored{Size: p.Size, Chunks: p.Chunks}); created {
			b.sets[p.Chunks] = u.chunks
		}
	} else {
		created = b.insert(p.Key, blob.Stored{Size: int64(len(p.Value)), Value: bytes.Clone(p.Value)})
	}
	b.pin(p.Key, p.Owner, clock.OrNow(p.Now).Add(p.TTL))
	b.addEdges(p.Key, p.Children)
	return created, nil
}

// addEdges records that parent references children, those it does not
// already. Called with mu held.
func (b *blobs) addEdges(parent blob.Key, children []blob.Key) {
	if len(children) > 0 {
		b.declared.Store(true)
	}
	for _, c := range children {
		if b.parents[c][parent] {
			continue
		}
		b.children[parent] = append(b.children[parent], c)
		if b.parents[c] == nil {
			b.parents[c] = map[blob.Key]bool{}
		}
		b.parents[c][parent] = true
	}
}

// dropEdges removes parent's edges. Called with mu held.
func (b *blobs) dropEdges(parent blob.Key) {
	for _, c := range b.children[parent] {
		delete(b.parents[c], parent)
		if len(b.parents[c]) == 0 {
			delete(b.parents, c)
		}
	}
	delete(b.children, parent)
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

func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	st, err := b.lookup(ctx, key)
	if err != nil {
		return blob.Stored{}, err
	}
	return copyStored(st), nil
}

// copyStored returns st with a copy of its inline value, the caller's to
// keep (an empty one not nil).
func copyStored(st blob.Stored) blob.Stored {
	st.Value = bytes.Clone(st.Value)
	if st.Chunks == 0 && st.Value == nil {
		st.Value = []byte{}
	}
	return st
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

func (b *blobs) Delete(ctx context.Context, p blob.DeleteParams) ([]blob.Verdict, error) {
	return b.arbitrate(ctx, p.Keys, p.Now, false)
}

func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	id, err := chunkid.Draw(func(id int64) (bool, error) {
		set := blob.ChunkSet(id)
		_, staged := b.uploads[set]
		_, published := b.sets[set]
		if staged || published {
			return false, nil
		}
		b.uploads[set] = &upload{owner: p.Owner, state: bytes.Clone(p.State), expires: clock.OrNow(p.Now).Add(p.Lease)}
		return true, nil
	})
	return blob.ChunkSet(id), err
}

func (b *blobs) UploadStatus(ctx context.Context, set blob.ChunkSet) (blob.UploadStatus, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return blob.UploadStatus{}, err
	}
	u, ok := b.uploads[set]
	if !ok {
		return blob.UploadStatus{}, lostUpload(set)
	}
	return blob.UploadStatus{Owner: u.owner, Size: u.size, State: bytes.Clone(u.state)}, nil
}

// lostUpload is the error for a chunk set with no live upload.
func lostUpload(set blob.ChunkSet) error {
	return fmt.Errorf("%w: chunk set %d has no upload (never begun, published, aborted, or reaped once its lease lapsed)", steaderr.ErrLost, set)
}

func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if err := chunkid.CheckChunk(p.Off, p.Data); err != nil {
		return err
	}
	u, ok := b.uploads[p.Set]
	if !ok {
		return lostUpload(p.Set)
	}
	if p.Off != u.size {
		return fmt.Errorf("%w: a chunk at offset %d of upload %d, which holds %d bytes (another writer appended)", steaderr.ErrConflict, p.Off, p.Set, u.size)
	}
	if len(p.Data) > 0 { // an empty append stores no chunk, one that tiles nothing
		u.chunks = append(u.chunks, chunk{off: p.Off, data: bytes.Clone(p.Data)})
	}
	u.size = p.Off + int64(len(p.Data))
	u.state = bytes.Clone(p.State)
	u.expires = clock.OrNow(p.Now).Add(p.Lease)
	return nil
}

// tiles reports whether chunks, in offset order, cover [0, size) exactly,
// each byte once.
func tiles(chunks []chunk, size int64) bool {
	var t chunkid.Tiling
	for _, c := range chunks {
		t.Add(c.off, int64(len(c.data)))
	}
	return t.Covers(size)
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

func (b *blobs) ReapUploads(ctx context.Context, p blob.ReapUploadsParams) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	now, n := clock.OrNow(p.Now), 0
	for set, u := range b.uploads {
		if !now.Before(u.expires) {
			delete(b.uploads, set)
			n++
		}
	}
	return n, nil
}

func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.e.check(ctx); err != nil {
		return blob.Chunk{}, err
	}
	chunks, ok := b.sets[set]
	if u, staged := b.uploads[set]; !ok && staged {
		chunks, ok = u.chunks, true
	}
	if !ok {
		return blob.Chunk{}, steaderr.ErrNotFound
	}
	// The chunk holding off is the last one starting at or before it.
	i, found := slices.BinarySearchFunc(chunks, off, func(c chunk, off int64) int { return cmp.Compare(c.off, off) })
	if !found {
		i--
	}
	if i < 0 {
		return blob.Chunk{}, steaderr.ErrNotFound
	}
	c := chunks[i]
	return blob.Chunk{Start: c.off, Size: int64(len(c.data)), Data: bytes.Clone(c.data)}, nil
}

// Tiered implements blob.Streamer: the memory engine has no bytes tier.
func (b *blobs) Tiered() bool { return false }

// WriteValue implements blob.Streamer: refused, there is no bytes tier.
func (b *blobs) WriteValue(context.Context, blob.WriteValueParams) (int64, error) {
	return 0, fmt.Errorf("%w: the memory engine has no bytes tier", steaderr.ErrInvalidArgument)
}

// ReadValue implements blob.Streamer: no value is an object.
func (b *blobs) ReadValue(_ context.Context, p blob.ReadValueParams) (io.ReadCloser, error) {
	return nil, fmt.Errorf("%w: object %s: the memory engine has no bytes tier", steaderr.ErrNotFound, p.Object)
}
