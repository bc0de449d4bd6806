// Package gc is stead's online, fleet-safe garbage collection of blobs:
// the policy of a sweep (what to reap, stage, take and arbitrate, and in
// which order) over a Backend's mechanics. The contract an application
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

// Backend is what a storage engine does for garbage collection: mechanics
// only. The portable Collector validates every argument before calling it.
// Every method returns steaderr.ErrClosed once the engine is closed. Times
// are whole microseconds; a zero Now means the engine's clock (the
// database's now() on PostgreSQL, the system clock elsewhere). Keys passed
// in a slice are sorted and distinct, at most blob.MaxDeleteBatch of them.
//
// The sweep's own steps (Reap, StageRange, Take, Arbitrate) take the
// sweep Lease they run under: an engine may refuse one without a lease
// (the remote engine's server does), refuses one whose lease is gone (an
// error wrapping steaderr.ErrLost) where the lease lives in a database
// session or row, and Arbitrate shares the lease's fate atomically.
type Backend interface {
	// Reap deletes the pins and refs expired at p.Now (expiry <= now) in
	// statements of bounded size, and reports how many; with p.DryRun it
	// deletes nothing and reports how many it would.
	Reap(ctx context.Context, p NowParams) (Reaped, error)
	// Stage makes those of p.Keys that are stored delete candidates
	// visible after p.VisibleAfter (zero: the engine's now), in one
	// statement; a key not stored is skipped, so the window holds stored
	// blobs only. Staging a key again with the same deadline changes
	// nothing; a new deadline replaces the old. The portable layer fences
	// it (CheckStage): only a sweep-lease holder stages, within MaxGrace;
	// the engine refuses a lease released or lost (steaderr.ErrLost), as
	// StageRange does.
	Stage(ctx context.Context, p StageParams) error
	// StagePass reports where the staging pass stands: the durable cursor
	// StageRange last recorded, and when the pass began.
	StagePass(ctx context.Context) (Pass, error)
	// StageRange stages, visible after p.Now + p.Grace, every blob among
	// the first p.Limit stored keys after p.After (the zero Key: from the
	// first key) that is not staged yet and that no live pin and no
	// liveness source references: set-based, in statements whose work is
	// bounded by p.Limit, not by the store's size, committed before it
	// returns. Unless p.DryRun it then records the cursor durably: the
	// last key covered, or the zero Key when the range reached the last
	// stored key (the pass is complete); a range from the zero Key records
	// p.Now as the pass's start. With p.DryRun it writes nothing and
	// reports what it would stage.
	StageRange(ctx context.Context, p StageRangeParams) (StagedRange, error)
	// Take removes and returns, sorted by key, up to p.Limit (at least 1)
	// candidates whose visible_after <= p.Now, the longest overdue first
	// when more are, in one atomic step that reads only the rows it
	// returns: a candidate is never returned twice. With p.DryRun it
	// returns them and removes nothing.
	Take(ctx context.Context, p TakeParams) ([]blob.Key, error)
	// Arbitrate decides p.Keys in one short transaction and returns one
	// Verdict per key, in p.Keys' order. It locks the keys' blob rows,
	// skipping those a put or pin holds (Busy); then, in new statements,
	// whose snapshots see whatever committed while the rows were being
	// locked, it locks and judges their pins at p.Now and then asks every
	// liveness source about the rest, one set-based query per source
	// (Protected: a live pin, a live ref, a parent's edge or a source);
	// then it deletes the unprotected blobs with their chunks, pins, window
	// rows, expired refs and own edges (so their children become
	// candidates) in one statement (Deleted; with p.DryRun nothing is
	// deleted) and commits once. A key not stored is Absent. An error
	// means nothing was deleted.
	Arbitrate(ctx context.Context, p ArbitrateParams) ([]blob.Verdict, error)
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
	// Declared reports whether the store ever declared any liveness
	// beyond pins: a registered source, a ref or a blob reference, now or
	// at any time before (durably where the engine is), so a store whose
	// last ref was deleted is still one that declares liveness.
	Declared(ctx context.Context) (bool, error)
	// Explain says why p.Key is kept or not at p.Now.
	Explain(ctx context.Context, p ExplainParams) (Explanation, error)
	// Pins calls yield for each pin, in (key, owner) order, until it
	// returns false: every pin live at p.Now, and expired ones not reaped
	// yet (an engine that keeps a put's pin in its blob's row lists it only
	// while it is live).
	Pins(ctx context.Context, p PinsParams, yield func(PinInfo) bool) error
	// Window calls yield for each staged candidate in key order until it
	// returns false.
	Window(ctx context.Context, yield func(Candidate) bool) error
	// Stored reads what the store holds (Stored) from one snapshot, in
	// one aggregate over the blobs and the window: its cost grows with
	// the number of blobs, not their bytes.
	Stored(ctx context.Context) (Stored, error)
}

// Stored is what a store holds, as Backend.Stored reads it.
type Stored struct {
	// Blobs counts the stored blobs and Bytes sums their sizes: a blob
	// kept in chunks or as a bytes-tier object counts once, by its size.
	// Chunks of uploads not published yet are not counted.
	Blobs, Bytes int64
	// PendingBlobs counts the stored blobs staged in the window (found
	// unprotected, deleted by a sweep once overdue unless something
	// protects them again) and PendingBytes sums their sizes.
	PendingBlobs, PendingBytes int64
}

// Lease is a held sweep lease.
type Lease interface {
	// Renew confirms that the lease is still held, extending it where it
	// lasts for a time, or fails with an error wrapping steaderr.ErrLost
	// once its session or row is gone: the sweeper must then stop.
	Renew(ctx context.Context) error
	// Release gives the lease up, on the connection that took it.
	Release(ctx context.Context) error
}

// Reaped counts what a Reap removed.
type Reaped struct {
	Pins, Refs int64
}

// NowParams are the arguments of Backend.Reap.
type NowParams struct {
	Now    time.Time
	DryRun bool
	// Lease is the sweep lease the call runs under, or nil.
	Lease Lease
}

// StageParams are the arguments of Backend.Stage.
type StageParams struct {
	Keys []blob.Key
	// VisibleAfter is when the candidates become deletable; zero: now, on
	// the engine's clock.
	VisibleAfter time.Time
	// Lease is the sweep lease the call runs under (CheckStage requires
	// one).
	Lease Lease
}

// Pass is where a staging pass over the store's keys stands.
type Pass struct {
	// After is the last key the pass covered; the zero Key when the next
	// range starts a new pass at the first key.
	After blob.Key
	// Started is when the pass began (when After is zero: when the last
	// pass began); zero if staging never ran.
	Started time.Time
}

// StageRangeParams are the arguments of Backend.StageRange.
type StageRangeParams struct {
	After  blob.Key
	Limit  int
	Now    time.Time
	Grace  time.Duration
	DryRun bool
	// Lease is the sweep lease the call runs under, or nil.
	Lease Lease
}

// StagedRange is what one StageRange covered and staged.
type StagedRange struct {
	// Covered counts the stored keys the range read; Staged those it
	// staged (in a dry run: would stage).
	Covered, Staged int64
	// Last is the last key covered, or the zero Key when the range reached
	// the last stored key.
	Last blob.Key
}

// TakeParams are the arguments of Backend.Take.
type TakeParams struct {
	Now    time.Time
	Limit  int
	DryRun bool
	// Lease is the sweep lease the call runs under, or nil.
	Lease Lease
}

// ArbitrateParams are the arguments of Backend.Arbitrate.
type ArbitrateParams struct {
	Keys   []blob.Key
	Now    time.Time
	DryRun bool
	// Lease is the sweep lease the arbitration runs under. An engine whose
	// lease lives in a database session or row makes the arbitration share
	// its fate: a lost lease fails the arbitration (an error wrapping
	// steaderr.ErrLost) and deletes nothing.
	Lease Lease
}

// PinsParams are the arguments of Backend.Pins.
type PinsParams struct {
	Now time.Time
}

// ExplainParams are the arguments of Backend.Explain.
type ExplainParams struct {
	Key blob.Key
	Now time.Time
}

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

// RefInfo is a ref as Explain reports it.
type RefInfo struct {
	Name string
	// Expiry is when the ref stops protecting the key; zero: never.
	Expiry time.Time
	// Weak reports a ref that names the key without protecting it.
	Weak bool
}

// Live reports whether the ref is live at now: it protects its key then,
// unless it is weak.
func (r RefInfo) Live(now time.Time) bool { return r.Expiry.IsZero() || now.Before(r.Expiry) }

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
	// Object names the bucket object holding the value, for an engine
	// that keeps it in its bytes tier; "" otherwise.
	Object string
	// Pins are the key's pins, live or not at Now.
	Pins []PinInfo
	// Sources name the liveness sources referencing the key.
	Sources []string
	// Refs are the refs naming the key, live or not at Now (an expired one
	// not reaped yet), strong or weak, in name order.
	Refs []RefInfo
	// Parents are the stored blobs that reference the key, in key order.
	Parents []blob.Key
	// Staged reports whether the key is a delete candidate, visible after
	// VisibleAfter.
	Staged       bool
	VisibleAfter time.Time
	// Now is the instant the explanation was judged at.
	Now time.Time
}

// ProcessLease is a sweep lease held in process, for an engine whose
// sweeps all run in one process (the memory and SQLite engines); it is API
// for engine authors, outside this module too
// (docs/decisions/0024-engine-api-for-third-parties.md). The zero value is
// free.
type ProcessLease struct{ held atomic.Bool }

// TryAcquire takes the lease if it is free.
func (p *ProcessLease) TryAcquire() (Lease, bool) {
	if !p.held.CompareAndSwap(false, true) {
		return nil, false
	}
	return &processRelease{p: p}, true
}

type processRelease struct {
	p        *ProcessLease
	released atomic.Bool
}

// Renew succeeds until Release: the lease lasts as long as its process.
func (r *processRelease) Renew(context.Context) error {
	if r.released.Load() {
		return fmt.Errorf("%w: sweep lease released", steaderr.ErrLost)
	}
	return nil
}

func (r *processRelease) Release(context.Context) error {
	if !r.released.Swap(true) {
		r.p.held.Store(false)
	}
	return nil
}

// FuncSources holds Go-function liveness sources for an engine whose
// sweeps all run in the registering process; like ProcessLease it is API
// for engine authors. The zero value is empty; it is safe for concurrent
// use.
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

// Referenced returns those of keys some source references, asking each
// source about the keys no source before it referenced.
func (f *FuncSources) Referenced(ctx context.Context, keys []blob.Key) (map[blob.Key]bool, error) {
	refs := map[blob.Key]bool{}
	for _, src := range f.List() {
		for _, key := range keys {
			if refs[key] {
				continue
			}
			ok, err := src.Referenced(ctx, key)
			if err != nil {
				return nil, fmt.Errorf("liveness source %s: %w", src, err)
			}
			refs[key] = ok
		}
	}
	for key, ok := range refs {
		if !ok {
			delete(refs, key)
		}
	}
	return refs, nil
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
