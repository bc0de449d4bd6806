// Package faultengine wraps a stead engine and fails chosen calls, the way
// Pebble's errorfs wraps a file system: an Injector, keyed by operation,
// decides before each call whether it fails and with what error. Injectors
// are deterministic: Switch fails what a test arms, Random fails a seeded
// pseudo-random share of calls, so a failing seed replays.
//
// It is for tests: it lets the failures a real database produces only by
// accident (a renewal lost to a network blip, a probe that errors, a write
// refused mid-walk) happen on demand, on every engine. Faults below the
// seam, inside one engine call — a group commit failing part-way — are
// injected in the database itself (a trigger that refuses one row; see
// TestFailedFlush in engine/postgres and engine/sqlite).
package faultengine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// Op names one engine operation.
type Op string

// The operations an Injector is asked about, one per engine method that
// can fail.
const (
	BlobPut          Op = "blob.Put"
	BlobGet          Op = "blob.Get"
	BlobStat         Op = "blob.Stat"
	BlobList         Op = "blob.List"
	BlobDelete       Op = "blob.Delete"
	BlobPin          Op = "blob.Pin"
	BlobRenewPin     Op = "blob.RenewPin"
	BlobUnpin        Op = "blob.Unpin"
	BlobBeginUpload  Op = "blob.BeginUpload"
	BlobUploadStatus Op = "blob.UploadStatus"
	BlobWriteChunk   Op = "blob.WriteChunk"
	BlobAbortUpload  Op = "blob.AbortUpload"
	BlobReapUploads  Op = "blob.ReapUploads"
	BlobReadChunk    Op = "blob.ReadChunk"
	BlobWriteValue   Op = "blob.WriteValue"
	BlobReadValue    Op = "blob.ReadValue"

	GCReap             Op = "gc.Reap"
	GCDeclared         Op = "gc.Declared"
	GCStage            Op = "gc.Stage"
	GCStagePass        Op = "gc.StagePass"
	GCStageRange       Op = "gc.StageRange"
	GCTake             Op = "gc.Take"
	GCArbitrate        Op = "gc.Arbitrate"
	GCAcquireSweep     Op = "gc.AcquireSweep"
	GCRegisterSource   Op = "gc.RegisterSource"
	GCUnregisterSource Op = "gc.UnregisterSource"
	GCSources          Op = "gc.Sources"
	GCExplain          Op = "gc.Explain"
	GCPins             Op = "gc.Pins"
	GCWindow           Op = "gc.Window"
	GCStored           Op = "gc.Stored"

	RefSet     Op = "ref.Set"
	RefGet     Op = "ref.Get"
	RefTouch   Op = "ref.Touch"
	RefDelete  Op = "ref.Delete"
	RefList    Op = "ref.List"
	RefResolve Op = "ref.Resolve"

	LockAcquire       Op = "lock.Acquire"
	LockRenew         Op = "lock.Renew"
	LockRelease       Op = "lock.Release"
	LockWatchReleases Op = "lock.WatchReleases"
	LockListHeld      Op = "lock.ListHeld"

	RecordRegisterGroup Op = "record.RegisterGroup"
	RecordGroupExists   Op = "record.GroupExists"
	RecordSave          Op = "record.Save"
	RecordSaveAll       Op = "record.SaveAll"
	RecordLoad          Op = "record.Load"
	RecordDelete        Op = "record.Delete"
	RecordListClaimable Op = "record.ListClaimable"
	RecordListLeased    Op = "record.ListLeased"
	RecordClaim         Op = "record.Claim"
	RecordClaimNext     Op = "record.ClaimNext"
	RecordRenew         Op = "record.Renew"
	RecordProbe         Op = "record.Probe"
	RecordWatch         Op = "record.WatchClaimable"

	Migrate       Op = "Migrate"
	SchemaVersion Op = "SchemaVersion"
)

// ErrInjected marks every error an injector made up; injected errors also
// wrap steaderr.ErrUnavailable, the error an outage would give.
var ErrInjected = errors.New("faultengine: injected fault")

// Injected returns the error injected into op.
func Injected(op Op) error {
	return fmt.Errorf("%w: %w: %s", steaderr.ErrUnavailable, ErrInjected, op)
}

// Injector decides, before each call of op, whether the call fails: a
// non-nil error is returned in place of calling the engine.
type Injector interface {
	Inject(op Op) error
}

// AfterInjector is an Injector that may also fail a call after it reached
// the wrapped engine and took effect, as a connection lost before the
// answer came back would: a non-nil InjectAfter(op), asked once the call
// returned without error, is returned in its place. The blob writes
// (Put, BeginUpload, WriteChunk, WriteValue, AbortUpload) ask it.
type AfterInjector interface {
	Injector
	InjectAfter(op Op) error
}

// Func is an Injector that asks a function: a non-nil Func(op) fails the
// call with that error.
type Func func(op Op) error

// Inject implements Injector.
func (f Func) Inject(op Op) error { return f(op) }

// Switch is an Injector that fails the operations a test arms, and counts
// every call. Its zero value injects nothing.
type Switch struct {
	mu    sync.Mutex
	armed map[Op]int // calls left to fail; < 0: every call
	after map[Op]int // calls left to fail once they took effect
	calls map[Op]int
}

// FailNextAfter makes the next n calls of op that succeed fail all the
// same, having taken effect (an AfterInjector's fault), until Heal.
func (s *Switch) FailNextAfter(op Op, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.after == nil {
		s.after = map[Op]int{}
	}
	s.after[op] = n
}

// InjectAfter implements AfterInjector.
func (s *Switch) InjectAfter(op Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.after[op] <= 0 {
		return nil
	}
	s.after[op]--
	return Injected(op)
}

// Fail makes every later call of op fail, until Heal.
func (s *Switch) Fail(op Op) { s.FailNext(op, -1) }

// FailNext makes the next n calls of op fail (n < 0: every call).
func (s *Switch) FailNext(op Op, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed == nil {
		s.armed = map[Op]int{}
	}
	s.armed[op] = n
}

// Heal makes op succeed again, before and after the call.
func (s *Switch) Heal(op Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.armed, op)
	delete(s.after, op)
}

// Calls returns how many times op was called, failed or not.
func (s *Switch) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Inject implements Injector.
func (s *Switch) Inject(op Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[Op]int{}
	}
	s.calls[op]++
	n, ok := s.armed[op]
	switch {
	case !ok || n == 0:
		return nil
	case n > 0:
		s.armed[op] = n - 1
	}
	return Injected(op)
}

// Random is an Injector that fails each call of its operations with
// probability p, drawn from a generator seeded once: the same seed and the
// same sequence of calls give the same faults.
type Random struct {
	mu  sync.Mutex
	rng *rand.Rand
	p   float64
	ops map[Op]bool
}

// NewRandom returns a Random over ops (none: every operation).
func NewRandom(seed uint64, p float64, ops ...Op) *Random {
	r := &Random{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), p: p}
	if len(ops) > 0 {
		r.ops = map[Op]bool{}
		for _, op := range ops {
			r.ops[op] = true
		}
	}
	return r
}

// Inject implements Injector.
func (r *Random) Inject(op Op) error {
	if r.ops != nil && !r.ops[op] {
		return nil
	}
	r.mu.Lock()
	fail := r.rng.Float64() < r.p
	r.mu.Unlock()
	if fail {
		return Injected(op)
	}
	return nil
}

// Engine is an engine.Engine whose calls an Injector may fail. A call that
// is failed never reaches the wrapped engine, so it changes nothing.
type Engine struct {
	inner   engine.Engine
	inj     Injector
	blobs   blobs
	locks   locks
	records records
	refs    refs
	gc      gcEngine
}

var _ engine.Engine = (*Engine)(nil)

// New wraps inner; inj decides which calls fail.
func New(inner engine.Engine, inj Injector) *Engine {
	e := &Engine{inner: inner, inj: inj}
	e.blobs = blobs{inner.Blobs(), inj}
	e.locks = locks{inner.Locks(), inj}
	e.records = records{inner.Records(), inj}
	e.refs = refs{inner.Refs(), inj}
	e.gc = gcEngine{inner.GC(), inj}
	return e
}

// Blobs implements engine.Engine.
func (e *Engine) Blobs() blob.Backend { return &e.blobs }

// Locks implements engine.Engine.
func (e *Engine) Locks() lock.Backend { return &e.locks }

// Records implements engine.Engine.
func (e *Engine) Records() record.Backend { return &e.records }

// GC implements engine.Engine.
func (e *Engine) GC() gc.Backend { return &e.gc }

// Refs implements engine.Engine.
func (e *Engine) Refs() ref.Backend { return &e.refs }

type refs struct {
	inner ref.Backend
	inj   Injector
}

func (r *refs) Set(ctx context.Context, p ref.SetParams) (ref.Ref, error) {
	if err := r.inj.Inject(RefSet); err != nil {
		return ref.Ref{}, err
	}
	return r.inner.Set(ctx, p)
}

func (r *refs) Get(ctx context.Context, p ref.GetParams) (ref.Ref, error) {
	if err := r.inj.Inject(RefGet); err != nil {
		return ref.Ref{}, err
	}
	return r.inner.Get(ctx, p)
}

func (r *refs) Touch(ctx context.Context, p ref.TouchParams) (ref.Ref, error) {
	if err := r.inj.Inject(RefTouch); err != nil {
		return ref.Ref{}, err
	}
	return r.inner.Touch(ctx, p)
}

func (r *refs) Delete(ctx context.Context, p ref.DeleteParams) error {
	if err := r.inj.Inject(RefDelete); err != nil {
		return err
	}
	return r.inner.Delete(ctx, p)
}

func (r *refs) Resolve(ctx context.Context, p ref.ResolveParams) (ref.Ref, blob.Stored, error) {
	if err := r.inj.Inject(RefResolve); err != nil {
		return ref.Ref{}, blob.Stored{}, err
	}
	return r.inner.Resolve(ctx, p)
}

func (r *refs) List(ctx context.Context, p ref.ListParams, yield func(ref.Ref) bool) error {
	if err := r.inj.Inject(RefList); err != nil {
		return err
	}
	return r.inner.List(ctx, p, yield)
}

// Migrate implements engine.Engine.
func (e *Engine) Migrate(ctx context.Context) error {
	if err := e.inj.Inject(Migrate); err != nil {
		return err
	}
	return e.inner.Migrate(ctx)
}

// SchemaVersion implements engine.Engine.
func (e *Engine) SchemaVersion(ctx context.Context) (int, int, error) {
	if err := e.inj.Inject(SchemaVersion); err != nil {
		return 0, 0, err
	}
	return e.inner.SchemaVersion(ctx)
}

// Cluster implements engine.Engine.
func (e *Engine) Cluster() (bool, string) { return e.inner.Cluster() }

// Close implements engine.Engine; it is never failed.
func (e *Engine) Close() error { return e.inner.Close() }

type blobs struct {
	inner blob.Backend
	inj   Injector
}

// after is err, or, when the call succeeded, the fault an AfterInjector
// injects after it.
func (b *blobs) after(op Op, err error) error {
	if a, ok := b.inj.(AfterInjector); ok && err == nil {
		return a.InjectAfter(op)
	}
	return err
}

func (b *blobs) Put(ctx context.Context, p blob.PutParams) (bool, error) {
	if err := b.inj.Inject(BlobPut); err != nil {
		return false, err
	}
	created, err := b.inner.Put(ctx, p)
	if err = b.after(BlobPut, err); err != nil {
		return false, err
	}
	return created, nil
}

func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	if err := b.inj.Inject(BlobGet); err != nil {
		return blob.Stored{}, err
	}
	return b.inner.Get(ctx, key)
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	if err := b.inj.Inject(BlobStat); err != nil {
		return blob.Info{}, err
	}
	return b.inner.Stat(ctx, key)
}

func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) error {
	if err := b.inj.Inject(BlobList); err != nil {
		return err
	}
	return b.inner.List(ctx, after, limit, yield)
}

func (b *blobs) Delete(ctx context.Context, p blob.DeleteParams) ([]blob.Verdict, error) {
	if err := b.inj.Inject(BlobDelete); err != nil {
		return nil, err
	}
	return b.inner.Delete(ctx, p)
}

func (b *blobs) Pin(ctx context.Context, p blob.PinParams) error {
	if err := b.inj.Inject(BlobPin); err != nil {
		return err
	}
	return b.inner.Pin(ctx, p)
}

func (b *blobs) RenewPin(ctx context.Context, p blob.PinParams) (bool, error) {
	if err := b.inj.Inject(BlobRenewPin); err != nil {
		return false, err
	}
	return b.inner.RenewPin(ctx, p)
}

func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	if err := b.inj.Inject(BlobBeginUpload); err != nil {
		return 0, err
	}
	set, err := b.inner.BeginUpload(ctx, p)
	return set, b.after(BlobBeginUpload, err)
}

func (b *blobs) UploadStatus(ctx context.Context, set blob.ChunkSet) (blob.UploadStatus, error) {
	if err := b.inj.Inject(BlobUploadStatus); err != nil {
		return blob.UploadStatus{}, err
	}
	return b.inner.UploadStatus(ctx, set)
}

func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	if err := b.inj.Inject(BlobWriteChunk); err != nil {
		return err
	}
	return b.after(BlobWriteChunk, b.inner.WriteChunk(ctx, p))
}

func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	if err := b.inj.Inject(BlobAbortUpload); err != nil {
		return err
	}
	return b.after(BlobAbortUpload, b.inner.AbortUpload(ctx, set))
}

func (b *blobs) ReapUploads(ctx context.Context, p blob.ReapUploadsParams) (int, error) {
	if err := b.inj.Inject(BlobReapUploads); err != nil {
		return 0, err
	}
	return b.inner.ReapUploads(ctx, p)
}

func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
	if err := b.inj.Inject(BlobReadChunk); err != nil {
		return blob.Chunk{}, err
	}
	return b.inner.ReadChunk(ctx, set, off)
}

// Tiered implements blob.Streamer; it is never failed.
func (b *blobs) Tiered() bool { return b.inner.Tiered() }

func (b *blobs) WriteValue(ctx context.Context, p blob.WriteValueParams) (int64, error) {
	if err := b.inj.Inject(BlobWriteValue); err != nil {
		return 0, err
	}
	n, err := b.inner.WriteValue(ctx, p)
	return n, b.after(BlobWriteValue, err)
}

func (b *blobs) ReadValue(ctx context.Context, p blob.ReadValueParams) (io.ReadCloser, error) {
	if err := b.inj.Inject(BlobReadValue); err != nil {
		return nil, err
	}
	return b.inner.ReadValue(ctx, p)
}

func (b *blobs) Unpin(ctx context.Context, p blob.UnpinParams) error {
	if err := b.inj.Inject(BlobUnpin); err != nil {
		return err
	}
	return b.inner.Unpin(ctx, p)
}

type gcEngine struct {
	inner gc.Backend
	inj   Injector
}

func (g *gcEngine) Reap(ctx context.Context, p gc.NowParams) (gc.Reaped, error) {
	if err := g.inj.Inject(GCReap); err != nil {
		return gc.Reaped{}, err
	}
	return g.inner.Reap(ctx, p)
}

func (g *gcEngine) Declared(ctx context.Context) (bool, error) {
	if err := g.inj.Inject(GCDeclared); err != nil {
		return false, err
	}
	return g.inner.Declared(ctx)
}

func (g *gcEngine) Stage(ctx context.Context, p gc.StageParams) error {
	if err := g.inj.Inject(GCStage); err != nil {
		return err
	}
	return g.inner.Stage(ctx, p)
}

func (g *gcEngine) StagePass(ctx context.Context) (gc.Pass, error) {
	if err := g.inj.Inject(GCStagePass); err != nil {
		return gc.Pass{}, err
	}
	return g.inner.StagePass(ctx)
}

func (g *gcEngine) StageRange(ctx context.Context, p gc.StageRangeParams) (gc.StagedRange, error) {
	if err := g.inj.Inject(GCStageRange); err != nil {
		return gc.StagedRange{}, err
	}
	return g.inner.StageRange(ctx, p)
}

func (g *gcEngine) Take(ctx context.Context, p gc.TakeParams) ([]blob.Key, error) {
	if err := g.inj.Inject(GCTake); err != nil {
		return nil, err
	}
	return g.inner.Take(ctx, p)
}

func (g *gcEngine) Arbitrate(ctx context.Context, p gc.ArbitrateParams) ([]blob.Verdict, error) {
	if err := g.inj.Inject(GCArbitrate); err != nil {
		return nil, err
	}
	return g.inner.Arbitrate(ctx, p)
}

func (g *gcEngine) AcquireSweep(ctx context.Context, holder string) (gc.Lease, bool, error) {
	if err := g.inj.Inject(GCAcquireSweep); err != nil {
		return nil, false, err
	}
	return g.inner.AcquireSweep(ctx, holder)
}

func (g *gcEngine) RegisterSource(ctx context.Context, src gc.Source) error {
	if err := g.inj.Inject(GCRegisterSource); err != nil {
		return err
	}
	return g.inner.RegisterSource(ctx, src)
}

func (g *gcEngine) UnregisterSource(ctx context.Context, src gc.Source) error {
	if err := g.inj.Inject(GCUnregisterSource); err != nil {
		return err
	}
	return g.inner.UnregisterSource(ctx, src)
}

func (g *gcEngine) Sources(ctx context.Context) ([]gc.Source, error) {
	if err := g.inj.Inject(GCSources); err != nil {
		return nil, err
	}
	return g.inner.Sources(ctx)
}

func (g *gcEngine) Explain(ctx context.Context, p gc.ExplainParams) (gc.Explanation, error) {
	if err := g.inj.Inject(GCExplain); err != nil {
		return gc.Explanation{}, err
	}
	return g.inner.Explain(ctx, p)
}

func (g *gcEngine) Pins(ctx context.Context, p gc.PinsParams, yield func(gc.PinInfo) bool) error {
	if err := g.inj.Inject(GCPins); err != nil {
		return err
	}
	return g.inner.Pins(ctx, p, yield)
}

func (g *gcEngine) Window(ctx context.Context, yield func(gc.Candidate) bool) error {
	if err := g.inj.Inject(GCWindow); err != nil {
		return err
	}
	return g.inner.Window(ctx, yield)
}

func (g *gcEngine) Stored(ctx context.Context) (gc.Stored, error) {
	if err := g.inj.Inject(GCStored); err != nil {
		return gc.Stored{}, err
	}
	return g.inner.Stored(ctx)
}

type locks struct {
	inner lock.Backend
	inj   Injector
}

func (l *locks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	if err := l.inj.Inject(LockAcquire); err != nil {
		return lock.AcquireResult{}, err
	}
	return l.inner.Acquire(ctx, p)
}

func (l *locks) Renew(ctx context.Context, p lock.RenewParams) (time.Time, bool, error) {
	if err := l.inj.Inject(LockRenew); err != nil {
		return time.Time{}, false, err
	}
	return l.inner.Renew(ctx, p)
}

func (l *locks) Release(ctx context.Context, p lock.ReleaseParams) (bool, error) {
	if err := l.inj.Inject(LockRelease); err != nil {
		return false, err
	}
	return l.inner.Release(ctx, p)
}

func (l *locks) WatchReleases(ctx context.Context, name string) (<-chan struct{}, bool, func(), error) {
	if err := l.inj.Inject(LockWatchReleases); err != nil {
		return nil, false, func() {}, err
	}
	return l.inner.WatchReleases(ctx, name)
}

func (l *locks) ListHeld(ctx context.Context, p lock.ListParams) ([]lock.Grant, error) {
	if err := l.inj.Inject(LockListHeld); err != nil {
		return nil, err
	}
	return l.inner.ListHeld(ctx, p)
}

type records struct {
	inner record.Backend
	inj   Injector
}

func (r *records) RegisterGroup(ctx context.Context, group string) error {
	if err := r.inj.Inject(RecordRegisterGroup); err != nil {
		return err
	}
	return r.inner.RegisterGroup(ctx, group)
}

func (r *records) GroupExists(ctx context.Context, group string) (bool, error) {
	if err := r.inj.Inject(RecordGroupExists); err != nil {
		return false, err
	}
	return r.inner.GroupExists(ctx, group)
}

func (r *records) Save(ctx context.Context, p record.SaveParams) (record.Record, error) {
	if err := r.inj.Inject(RecordSave); err != nil {
		return record.Record{}, err
	}
	return r.inner.Save(ctx, p)
}

func (r *records) Load(ctx context.Context, id string) (record.Record, error) {
	if err := r.inj.Inject(RecordLoad); err != nil {
		return record.Record{}, err
	}
	return r.inner.Load(ctx, id)
}

func (r *records) Delete(ctx context.Context, id string) error {
	if err := r.inj.Inject(RecordDelete); err != nil {
		return err
	}
	return r.inner.Delete(ctx, id)
}

func (r *records) ListClaimable(ctx context.Context, p record.ListParams) ([]record.Record, error) {
	if err := r.inj.Inject(RecordListClaimable); err != nil {
		return nil, err
	}
	return r.inner.ListClaimable(ctx, p)
}

func (r *records) ListLeased(ctx context.Context, p record.ListLeasedParams) ([]record.Record, error) {
	if err := r.inj.Inject(RecordListLeased); err != nil {
		return nil, err
	}
	return r.inner.ListLeased(ctx, p)
}

func (r *records) Claim(ctx context.Context, p record.ClaimParams) (record.Record, error) {
	if err := r.inj.Inject(RecordClaim); err != nil {
		return record.Record{}, err
	}
	return r.inner.Claim(ctx, p)
}

func (r *records) ClaimNext(ctx context.Context, p record.ClaimNextParams) ([]record.Record, error) {
	if err := r.inj.Inject(RecordClaimNext); err != nil {
		return nil, err
	}
	return r.inner.ClaimNext(ctx, p)
}

func (r *records) Renew(ctx context.Context, p record.RenewParams) (record.Lease, error) {
	if err := r.inj.Inject(RecordRenew); err != nil {
		return record.Lease{}, err
	}
	return r.inner.Renew(ctx, p)
}

func (r *records) Probe(ctx context.Context, p record.ProbeParams) (record.Probe, error) {
	if err := r.inj.Inject(RecordProbe); err != nil {
		return record.Probe{}, err
	}
	return r.inner.Probe(ctx, p)
}

// SaveAll implements record.Backend: an injected fault fails every record
// of the batch, as a failed group commit does.
func (r *records) SaveAll(ctx context.Context, p record.SaveAllParams) []record.SaveResult {
	if err := r.inj.Inject(RecordSaveAll); err != nil {
		out := make([]record.SaveResult, len(p.Records))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return r.inner.SaveAll(ctx, p)
}

func (r *records) WatchClaimable(ctx context.Context, group string) (<-chan struct{}, bool, func(), error) {
	if err := r.inj.Inject(RecordWatch); err != nil {
		return nil, false, func() {}, err
	}
	return r.inner.WatchClaimable(ctx, group)
}
