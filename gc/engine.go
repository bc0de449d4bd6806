// Package gc is stead's online, fleet-safe garbage collection of blobs:
// the policy of a sweep (what to reap, stage, take and arbitrate, and in
// which order) over an Engine's mechanics. The contract an application
// keeps — pin, reference, release — is in docs/guides/gc.md.
package gc

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// Engine is what a storage engine does for garbage collection: mechanics
// only. The portable Collector validates every argument before calling it.
// Every method returns steaderr.ErrClosed once the engine is closed. Times
// are whole microseconds; a zero Now means the engine's clock (the
// database's now() on PostgreSQL, the system clock elsewhere).
type Engine interface {
	// ReapPins deletes the pins expired at p.Now (expiry <= now) and
	// reports how many; with p.DryRun it deletes nothing and reports how
	// many it would.
	ReapPins(ctx context.Context, p NowParams) (int64, error)
	// Stage makes key a delete candidate visible after visibleAfter.
	// Staging the same (key, deadline) again changes nothing; a new
	// deadline replaces the old.
	Stage(ctx context.Context, key blob.Key, visibleAfter time.Time) error
	// StageUnreferenced stages, visible after p.Now + p.Grace, every stored
	// blob that is not staged yet and that no live pin and no liveness
	// source references, set-based (no round trip per key), and reports
	// how many; with p.DryRun it stages nothing and reports how many it
	// would.
	StageUnreferenced(ctx context.Context, p StageParams) (int64, error)
	// Take removes and returns, in key order, up to p.Limit (<= 0: every)
	// candidates
	// whose visible_after <= p.Now, in one atomic step: a candidate is
	// never returned twice. With p.DryRun it returns them and removes
	// nothing.
	Take(ctx context.Context, p TakeParams) ([]blob.Key, error)
	// Arbitrate decides p.Key in its own short transaction: it locks the
	// blob row, skipping it when a put or pin holds it (Busy); then, in
	// new statements, checks live pins at p.Now and every liveness source
	// (Protected); else it deletes the blob (Deleted; with p.DryRun it
	// deletes nothing). An absent blob is Absent.
	Arbitrate(ctx context.Context, p ArbitrateParams) (Verdict, error)
	// AcquireSweep tries to take the sweep lease of this store's data
	// (one sweeper at a time per database or schema) for holder; ok is
	// false when another sweep holds it. The lease lasts until Release or
	// the end of the connection or process that holds it.
	AcquireSweep(ctx context.Context, holder string) (lease Lease, ok bool, err error)
	// RegisterSource records a liveness source, durably where the engine
	// is shared, so that every sweeper honours it. Registering it again
	// changes nothing. An engine that cannot consult src refuses it with
	// an error wrapping steaderr.ErrInvalidArgument (or errors.ErrUnsupported)
	// that says what to use instead.
	RegisterSource(ctx context.Context, src Source) error
	// UnregisterSource removes a source; an unknown one is not an error.
	UnregisterSource(ctx context.Context, src Source) error
	// Sources lists the registered sources.
	Sources(ctx context.Context) ([]Source, error)
	// Explain says why key is kept or not at now.
	Explain(ctx context.Context, key blob.Key, now time.Time) (Explanation, error)
	// Pins calls yield for each pin, live or not, in (key, owner) order,
	// until it returns false.
	Pins(ctx context.Context, yield func(PinInfo) bool) error
	// Window calls yield for each staged candidate in key order until it
	// returns false.
	Window(ctx context.Context, yield func(Candidate) bool) error
}

// Lease is a held sweep lease.
type Lease interface {
	// Release gives the lease up, on the connection that took it.
	Release(ctx context.Context) error
}

// NowParams are the arguments of Engine.ReapPins.
type NowParams struct {
	Now    time.Time
	DryRun bool
}

// StageParams are the arguments of Engine.StageUnreferenced.
type StageParams struct {
	Now    time.Time
	Grace  time.Duration
	DryRun bool
}

// TakeParams are the arguments of Engine.Take.
type TakeParams struct {
	Now    time.Time
	Limit  int
	DryRun bool
}

// ArbitrateParams are the arguments of Engine.Arbitrate.
type ArbitrateParams struct {
	Key    blob.Key
	Now    time.Time
	DryRun bool
	// Lease is the sweep lease the arbitration runs under. An engine whose
	// lease lives in a database session or row makes the arbitration share
	// its fate: a lost lease fails the arbitration (an error wrapping
	// steaderr.ErrLost) and deletes nothing.
	Lease Lease
}

// Verdict is the outcome of one arbitration.
type Verdict struct {
	Outcome Outcome
	// Size is the deleted (or, in a dry run, deletable) blob's size.
	Size int64
}

// Outcome is what an arbitration found.
type Outcome uint8

const (
	// Deleted: the blob was unprotected and is deleted (in a dry run:
	// would be).
	Deleted Outcome = iota + 1
	// Protected: a live pin or a liveness source references the key.
	Protected
	// Busy: a put or pin held the row; it is being protected now.
	Busy
	// Absent: no blob is stored under the key.
	Absent
)

// Source is a liveness source: a key referenced by one is live. Exactly
// one of the SQL form (Schema, Table, Column: a text column of a table in
// the engine's database) and the Go form (Name and Referenced, consulted
// in process) is set.
type Source struct {
	Schema, Table, Column string
	// Name names a Go-function source; Referenced reports whether key is
	// referenced. It must be safe for concurrent use, fast (SQLite and
	// memory call it while holding their write lock) and must not call
	// back into the store.
	Name       string
	Referenced func(ctx context.Context, key blob.Key) (bool, error)
}

// IsSQL reports whether s is a SQL table source.
func (s Source) IsSQL() bool { return s.Table != "" }

// String names s: schema.table(column), or func:name.
func (s Source) String() string {
	if s.IsSQL() {
		return s.Schema + "." + s.Table + "(" + s.Column + ")"
	}
	return "func:" + s.Name
}

// PinInfo is one pin.
type PinInfo struct {
	Key    blob.Key
	Owner  string
	Expiry time.Time
}

// Candidate is one staged delete candidate.
type Candidate struct {
	Key          blob.Key
	VisibleAfter time.Time
}

// Explanation says why a key is kept or not.
type Explanation struct {
	Key blob.Key
	// Stored reports whether the blob exists; Size is its size.
	Stored bool
	Size   int64
	// Pins are the key's pins, live or not at Now.
	Pins []PinInfo
	// Sources name the liveness sources referencing the key.
	Sources []string
	// Staged reports whether the key is a delete candidate, visible after
	// VisibleAfter.
	Staged       bool
	VisibleAfter time.Time
	// Now is the instant the explanation was judged at.
	Now time.Time
}

// Err is the error a Delete returns for v: nil once deleted, an error
// wrapping steaderr.ErrNotFound for an absent blob, steaderr.ErrProtected
// for a protected one (or one a put holds).
func (v Verdict) Err() error {
	switch v.Outcome {
	case Deleted:
		return nil
	case Absent:
		return steaderr.ErrNotFound
	}
	return steaderr.ErrProtected
}

// ProcessLease is a sweep lease held in process, for engines whose data
// one process uses. The zero value is free.
type ProcessLease struct{ held atomic.Bool }

// TryAcquire takes the lease if it is free.
func (p *ProcessLease) TryAcquire() (Lease, bool) {
	if !p.held.CompareAndSwap(false, true) {
		return nil, false
	}
	return processRelease{p}, true
}

type processRelease struct{ p *ProcessLease }

func (r processRelease) Release(context.Context) error {
	r.p.held.Store(false)
	return nil
}

// FuncSources holds Go-function liveness sources for engines whose sweeps
// all run in the registering process. The zero value is empty; it is safe
// for concurrent use.
type FuncSources struct {
	mu      sync.Mutex
	sources map[string]Source
}

// Register adds src, or replaces the source of the same name. A SQL
// source is refused with an error wrapping steaderr.ErrInvalidArgument
// naming engine.
func (f *FuncSources) Register(engine string, src Source) error {
	if src.IsSQL() {
		return fmt.Errorf("%w: %s: SQL liveness source %s refused: register a Go-function source that reads your references", steaderr.ErrInvalidArgument, engine, src)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sources == nil {
		f.sources = map[string]Source{}
	}
	f.sources[src.Name] = src
	return nil
}

// Unregister removes the source named like src, if any.
func (f *FuncSources) Unregister(src Source) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !src.IsSQL() {
		delete(f.sources, src.Name)
	}
}

// Missing returns those of names not registered here, in their order.
func (f *FuncSources) Missing(names []string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, n := range names {
		if _, ok := f.sources[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// List returns the sources in name order.
func (f *FuncSources) List() []Source {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Collect(maps.Values(f.sources))
	slices.SortFunc(out, func(x, y Source) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// References returns the names of the sources referencing key, asking
// each in name order (with first, stopping at the first that does).
func (f *FuncSources) References(ctx context.Context, key blob.Key, first bool) ([]string, error) {
	var refs []string
	for _, src := range f.List() {
		ok, err := src.Referenced(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("liveness source %s: %w", src, err)
		}
		if ok {
			refs = append(refs, src.String())
			if first {
				break
			}
		}
	}
	return refs, nil
}
