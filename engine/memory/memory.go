// Package memory is the in-memory engine: the reference every other engine
// is compared against. Nothing is durable and nothing is shared between
// processes. Values are copied in and out, so callers never alias stored
// bytes.
package memory

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// Engine is the in-memory engine. The zero value is not usable; call New.
type Engine struct {
	closed  atomic.Bool
	blobs   blobs
	locks   locks
	records records
}

var _ engine.Engine = (*Engine)(nil)

// New returns an empty in-memory engine.
func New() *Engine {
	e := &Engine{}
	e.blobs.e = e
	e.blobs.values = make(map[blob.Key]blob.Stored)
	e.blobs.uploads = make(map[blob.ChunkSet]*upload)
	e.blobs.sets = make(map[blob.ChunkSet][]chunk)
	e.blobs.pins = make(map[blob.Key]map[string]time.Time)
	e.blobs.window = make(map[blob.Key]time.Time)
	e.blobs.refs = make(map[string]*memRef)
	e.blobs.named = make(map[blob.Key]map[string]bool)
	e.blobs.children = make(map[blob.Key][]blob.Key)
	e.blobs.parents = make(map[blob.Key]map[blob.Key]bool)
	e.locks.e = e
	e.locks.rows = make(map[string]*lockRow)
	e.records.init(e)
	return e
}

// Blobs implements engine.Engine.
func (e *Engine) Blobs() blob.Backend { return &e.blobs }

// GC implements engine.Engine.
func (e *Engine) GC() gc.Backend { return gcMech{&e.blobs} }

// Locks implements engine.Engine.
func (e *Engine) Locks() lock.Backend { return &e.locks }

// Records implements engine.Engine.
func (e *Engine) Records() record.Backend { return &e.records }

// Migrate implements engine.Engine; there is no schema to migrate.
func (e *Engine) Migrate(ctx context.Context) error { return e.check(ctx) }

// SchemaVersion implements engine.Engine; the memory engine has no schema.
func (e *Engine) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	return 0, 0, e.check(ctx)
}

// Cluster implements engine.Engine.
func (e *Engine) Cluster() (bool, string) { return false, "in-memory; not shared" }

// Close implements engine.Engine. The data is dropped.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.blobs.mu.Lock()
	e.blobs.values, e.blobs.keys, e.blobs.pins, e.blobs.window = nil, nil, nil, nil
	e.blobs.uploads, e.blobs.sets = nil, nil
	e.blobs.refs, e.blobs.named, e.blobs.children, e.blobs.parents = nil, nil, nil, nil
	e.blobs.mu.Unlock()
	e.locks.mu.Lock()
	e.locks.rows = nil
	e.locks.mu.Unlock()
	e.locks.released.WakeAll() // waiters retry, and learn of the Close
	e.records.mu.Lock()
	e.records.groups, e.records.recs = nil, nil
	e.records.mu.Unlock()
	return nil
}

// check returns the error an operation must fail with before it starts.
func (e *Engine) check(ctx context.Context) error {
	if e.closed.Load() {
		return steaderr.ErrClosed
	}
	return ctx.Err()
}
