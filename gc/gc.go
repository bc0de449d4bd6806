package gc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/steaderr"
)

const (
	// DefaultGrace is the default for Options.Grace.
	DefaultGrace = time.Hour
	// MaxGrace is the longest grace: Options.Grace and a staging range's
	// grace are at most this, and a candidate is staged visible at most
	// this long after now, so nothing unprotected outlives every sweep.
	MaxGrace = 30 * 24 * time.Hour
	// DefaultBatch is the default for Options.Batch.
	DefaultBatch = 1000
	// DefaultStageRange is the default for Options.StageRange.
	DefaultStageRange = 10000
	// DefaultStagePerSweep is the default for Options.StagePerSweep.
	DefaultStagePerSweep = 1000000
	// maxIdentLen bounds a SQL source's names: PostgreSQL truncates longer
	// identifiers silently.
	maxIdentLen = 63
	// restageTimeout bounds putting a failed batch's keys back in the
	// window, which runs even when the sweep's context has ended.
	restageTimeout = 10 * time.Second
	// renewEvery is how often a sweep renews its lease between steps, well
	// within the shortest lease an engine keeps without renewal.
	renewEvery = 5 * time.Second
)

// Options configures a Collector.
type Options struct {
	// Grace is how long a blob found unreferenced and unpinned waits in the
	// window before a sweep may delete it, and the least time between the
	// starts of two staging passes. Safety never rests on it (every delete
	// is arbitrated); it bounds how soon unreferenced content goes: between
	// one and about two graces after it lost its last protection.
	// Defaults to DefaultGrace; at most MaxGrace.
	Grace time.Duration
	// Batch is how many window candidates one arbitration takes and
	// decides in one transaction, at most blob.MaxDeleteBatch. Defaults to
	// DefaultBatch.
	Batch int
	// StageRange is how many stored keys one staging statement covers.
	// Defaults to DefaultStageRange.
	StageRange int
	// StagePerSweep is the most stored keys one sweep's staging covers; a
	// pass over a larger store resumes in the next sweep from a durable
	// cursor. Defaults to DefaultStagePerSweep.
	StagePerSweep int
	// AllUnreferenced lets every sweep of this collector delete in a store
	// that never declared liveness (see SweepOptions.AllUnreferenced).
	// Defaults to false.
	AllUnreferenced bool
	// Holder names this process in the sweep lease (the store's instance
	// id).
	Holder string
	// Now is the clock pins and the window are judged against, for tests
	// that move time without sleeping. Defaults to nil: the engine's clock.
	Now func() time.Time
	// ReapUploads, if set, discards the staged chunks of chunked puts
	// whose upload lease lapsed (blob.Store.ReapUploads); each sweep calls
	// it after reaping pins.
	ReapUploads func(ctx context.Context) (int, error)
}

// Collector runs garbage-collection sweeps over a Backend. It is safe for
// concurrent use; concurrent sweeps of one database take turns through the
// sweep lease. Over a nil Backend (a store whose data is collected
// elsewhere) every method fails with errors.ErrUnsupported.
type Collector struct {
	eng  Backend
	opts Options
}

// ErrSourceMissing is wrapped by the error of a sweep or delete refused
// because a Go-function liveness source registered on the store by another
// process is not registered in this one, which cannot consult it.
var ErrSourceMissing = errors.New("gc: liveness source not registered in this process")

// ErrNoLiveness is wrapped by the error of a sweep refused because the
// store never declared liveness at all (no ref, no blob reference, no
// source, ever: Backend.Declared), so every blob in it is garbage once its
// pin lapses. It wraps steaderr.ErrProtected.
var ErrNoLiveness = fmt.Errorf("%w: the store never declared liveness", steaderr.ErrProtected)

// errNoGC is what a Collector over a nil Backend answers.
var errNoGC = fmt.Errorf("gc: %w: this store's engine is collected elsewhere", errors.ErrUnsupported)

// New returns a Collector over eng (nil: see Collector). Non-positive
// Grace, Batch, StageRange or StagePerSweep mean their defaults; a Grace
// over MaxGrace, a Batch over blob.MaxDeleteBatch or a StageRange over
// MaxStageRange is cut to it.
func New(eng Backend, opts Options) *Collector {
	if eng == nil {
		eng = unsupported{}
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	opts.Grace = min(opts.Grace, MaxGrace)
	opts.Grace = opts.Grace.Truncate(time.Microsecond)
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	opts.Batch = min(opts.Batch, blob.MaxDeleteBatch)
	if opts.StageRange <= 0 {
		opts.StageRange = DefaultStageRange
	}
	opts.StageRange = min(opts.StageRange, MaxStageRange)
	if opts.StagePerSweep <= 0 {
		opts.StagePerSweep = DefaultStagePerSweep
	}
	if opts.Holder == "" {
		opts.Holder = "stead"
	}
	return &Collector{eng: eng, opts: opts}
}

// Report is what one sweep did (or, in a dry run, would do).
type Report struct {
	// DryRun reports that nothing was changed: the counts say what a sweep
	// would do now.
	DryRun bool
	// Aborted is why the sweep did not run ("" when it ran): SweeperBusy
	// when another sweep holds the lease.
	Aborted string
	// Reaped counts expired pins removed; ReapedRefs expired refs.
	Reaped, ReapedRefs int64
	// Uploads counts abandoned chunked uploads reaped (not in a dry run).
	Uploads int64
	// Taken counts window candidates taken for arbitration; each was
	// Deleted, Rescued (a pin, a source or a put in flight protected it)
	// or Absent (already gone).
	Taken, Deleted, Rescued, Absent int64
	// BytesFreed sums the deleted blobs' sizes.
	BytesFreed int64
	// Staged counts blobs newly found unreferenced and staged.
	Staged int64
	// Covered counts the stored keys the sweep's staging read, and
	// Wrapped reports that its pass reached the last key. A dry run covers
	// a whole pass from the first key.
	Covered int64
	Wrapped bool
	// NextPass, when staging did not run because a pass completed less
	// than a grace ago, is when the next pass may begin.
	NextPass time.Time
	// ObjectsListed counts the bytes tier's objects the orphan step
	// listed, Orphans those it deleted (no blob and no upload names them).
	ObjectsListed, Orphans int64
	// Stored is what the store held when the sweep ended (Backend.Stored),
	// nil when the sweep did not run, its engine cannot tell
	// (errors.ErrUnsupported) or the reading failed.
	Stored *Stored
	// Duration is how long the sweep ran.
	Duration time.Duration
}

// SweeperBusy is Report.Aborted when another sweep holds the lease.
const SweeperBusy = "SweeperBusy"

func (r Report) String() string {
	if r.Aborted != "" {
		return "aborted: " + r.Aborted
	}
	prefix := ""
	if r.DryRun {
		prefix = "dry run (would): "
	}
	staging := fmt.Sprintf("staged %d of %d keys covered", r.Staged, r.Covered)
	switch {
	case !r.NextPass.IsZero():
		staging = "staging paused until " + r.NextPass.UTC().Format(time.RFC3339)
	case r.Wrapped:
		staging += " (pass complete)"
	}
	orphans := ""
	if r.ObjectsListed > 0 {
		orphans = fmt.Sprintf("; %d orphan objects deleted of %d listed", r.Orphans, r.ObjectsListed)
	}
	stored := ""
	if r.Stored != nil {
		stored = fmt.Sprintf("; stored %d blobs (%d bytes), %d pending (%d bytes)", r.Stored.Blobs, r.Stored.Bytes, r.Stored.PendingBlobs, r.Stored.PendingBytes)
	}
	return fmt.Sprintf("%sreaped %d pins, %d refs and %d uploads, took %d candidates: deleted %d (%d bytes), rescued %d, absent %d; %s%s%s; in %v",
		prefix, r.Reaped, r.ReapedRefs, r.Uploads, r.Taken, r.Deleted, r.BytesFreed, r.Rescued, r.Absent, staging, orphans, stored, r.Duration.Round(time.Millisecond))
}

// SweepOptions are the options of one sweep.
type SweepOptions struct {
	// DryRun changes nothing and reports what a sweep would do.
	DryRun bool
	// AllUnreferenced lets the sweep delete in a store that never
	// declared liveness: no ref, no blob reference, no registered source,
	// ever. There
	// every blob is garbage once its pin lapses, so a sweep refuses
	// (ErrNoLiveness) unless told so; a dry run reports what it would do
	// either way.
	AllUnreferenced bool
	// Progress, if set, is called with the report so far after each step.
	Progress func(Report)
}

// Sweep runs one sweep under the sweep lease: (1) reap expired pins; (2)
// take the overdue window candidates a batch at a time and arbitrate each
// batch in one short transaction, deleting only what no live pin and no
// source protects; (3) continue the staging pass from its durable cursor,
// a range at a time, staging what nothing protects, visible after now +
// Grace; (4) read what the store holds then (Report.Stored). A new pass
// begins at most once per Grace. Another sweep holding the lease is not
// an error: the report says Aborted: SweeperBusy.
func (c *Collector) Sweep(ctx context.Context, opts SweepOptions) (rep Report, err error) {
	start := time.Now()
	rep.DryRun = opts.DryRun
	defer func() { rep.Duration = time.Since(start) }()
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("gc sweep: %w", err)
	}
	lease, ok, err := c.eng.AcquireSweep(ctx, c.opts.Holder)
	acquired := time.Now()
	if err != nil {
		return rep, fmt.Errorf("gc sweep: lease: %w", err)
	}
	if !ok {
		rep.Aborted = SweeperBusy
		return rep, nil
	}
	defer func() {
		if rerr := lease.Release(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, fmt.Errorf("gc sweep: releasing the lease: %w", rerr))
		}
	}()
	if !opts.DryRun && !opts.AllUnreferenced && !c.opts.AllUnreferenced {
		if err := c.checkLiveness(ctx); err != nil {
			return rep, fmt.Errorf("gc sweep: %w", err)
		}
	}
	progress := func() {
		if opts.Progress != nil {
			rep.Duration = time.Since(start)
			opts.Progress(rep)
		}
	}
	now := c.now()
	reaped, err := c.eng.Reap(ctx, NowParams{Now: now, DryRun: opts.DryRun, Lease: lease})
	if err != nil {
		return rep, fmt.Errorf("gc sweep: reap: %w", err)
	}
	rep.Reaped, rep.ReapedRefs = reaped.Pins, reaped.Refs
	if c.opts.ReapUploads != nil && !opts.DryRun {
		n, err := c.opts.ReapUploads(ctx)
		rep.Uploads = int64(n)
		if err != nil {
			return rep, fmt.Errorf("gc sweep: reap uploads: %w", err)
		}
	}
	progress()
	held := &heldLease{lease: lease, renewed: acquired}
	if err := c.collect(ctx, held, now, opts.DryRun, &rep, progress); err != nil {
		return rep, err
	}
	if err := c.stage(ctx, held, opts.DryRun, &rep, progress); err != nil {
		return rep, err
	}
	if err := c.sweepOrphans(ctx, held, opts.DryRun, &rep, progress); err != nil {
		return rep, err
	}
	// What the store holds is a reading, not a step: failing to read it
	// leaves the report's Stored nil and the sweep's work reported.
	if st, err := c.eng.Stored(ctx); err == nil {
		rep.Stored = &st
	}
	return rep, nil
}

// Stored reads what the store holds now (Backend.Stored).
func (c *Collector) Stored(ctx context.Context) (Stored, error) {
	st, err := c.eng.Stored(ctx)
	if err != nil {
		return Stored{}, fmt.Errorf("gc stored: %w", err)
	}
	return st, nil
}

// heldLease is a sweep's lease and when it was last renewed.
type heldLease struct {
	lease   Lease
	renewed time.Time
}

// keep renews the lease when renewEvery has passed since the last renewal:
// an engine may end a lease left idle (a stopped sweeper's), and a sweep
// that lost its lease must stop.
func (h *heldLease) keep(ctx context.Context) error {
	if time.Since(h.renewed) < renewEvery {
		return nil
	}
	if err := h.lease.Renew(ctx); err != nil {
		return fmt.Errorf("gc sweep: renewing the lease: %w", err)
	}
	h.renewed = time.Now()
	return nil
}

// CheckKeys checks keys as the Backend seam expects them: none zero, sorted
// in strictly ascending order (so distinct), at most blob.MaxDeleteBatch.
// Errors wrap ErrInvalidKey or ErrInvalidArgument. Adapters that hand a
// client's keys to a Backend (the HTTP server) call it.
func CheckKeys(keys []blob.Key) error {
	if len(keys) > blob.MaxDeleteBatch {
		return fmt.Errorf("%w: %d keys, at most %d at a time", steaderr.ErrInvalidArgument, len(keys), blob.MaxDeleteBatch)
	}
	for i, k := range keys {
		if k.IsZero() {
			return fmt.Errorf("%w: zero key", steaderr.ErrInvalidKey)
		}
		if i > 0 && keys[i-1].Compare(k) >= 0 {
			return fmt.Errorf("%w: keys not in strictly ascending order at %s", steaderr.ErrInvalidArgument, k)
		}
	}
	return nil
}

// CheckStage checks a Stage as the Backend seam may take it from a caller
// that is not a Collector's own sweep (the HTTP server hands it a
// client's): a sweep lease held, since only a sweeper stages; keys as
// CheckKeys; and a deadline, unless zero (now), from now to now +
// MaxGrace, judged at now (zero: the local clock) — a later one would keep
// an unprotected blob through every sweep, an earlier one skip its grace.
// Errors wrap ErrInvalidKey or ErrInvalidArgument.
func CheckStage(p StageParams, now time.Time) error {
	if p.Lease == nil {
		return fmt.Errorf("%w: staging needs the sweep lease: only a sweep stages candidates", steaderr.ErrInvalidArgument)
	}
	if err := CheckKeys(p.Keys); err != nil {
		return err
	}
	if p.VisibleAfter.IsZero() {
		return nil
	}
	if now.IsZero() {
		now = time.Now()
	}
	if p.VisibleAfter.Before(now.Truncate(time.Microsecond)) || p.VisibleAfter.After(now.Add(MaxGrace)) {
		return fmt.Errorf("%w: visible after %s: want from now (%s) to now + %v, or none for now",
			steaderr.ErrInvalidArgument, p.VisibleAfter.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), MaxGrace)
	}
	return nil
}

// CheckGrace checks a grace: 0 to MaxGrace. Errors wrap
// ErrInvalidArgument.
func CheckGrace(grace time.Duration) error {
	if grace < 0 || grace > MaxGrace {
		return fmt.Errorf("%w: grace %v: want 0 to %v", steaderr.ErrInvalidArgument, grace, MaxGrace)
	}
	return nil
}

// CheckLimit checks the limit of a take or a staging range: 1 to max.
func CheckLimit(limit, max int) error {
	if limit < 1 || limit > max {
		return fmt.Errorf("%w: limit %d, want 1 to %d", steaderr.ErrInvalidArgument, limit, max)
	}
	return nil
}

// MaxStageRange bounds Options.StageRange and one staging step's limit.
const MaxStageRange = 1000000

// checkLiveness refuses a sweep of a store that never declared liveness.
func (c *Collector) checkLiveness(ctx context.Context) error {
	declared, err := c.eng.Declared(ctx)
	if err != nil {
		return fmt.Errorf("reading what the store declares live: %w", err)
	}
	if !declared {
		return fmt.Errorf("%w: never a ref, a blob reference or a liveness source, so every blob is garbage once its pin lapses; "+
			"nothing is deleted: keep what you want with a ref (Refs.Set, stead ref set), or, if the store is a cache whose blobs "+
			"may all go, sweep with AllUnreferenced (stead gc --all-unreferenced); a dry run shows what would go", ErrNoLiveness)
	}
	return nil
}

// collect takes the overdue candidates a batch at a time and arbitrates
// each batch. A batch whose arbitration fails goes back to the window,
// overdue, instead of waiting for a new pass and a whole grace.
func (c *Collector) collect(ctx context.Context, held *heldLease, now time.Time, dry bool, rep *Report, progress func()) error {
	lease := held.lease
	for {
		if err := held.keep(ctx); err != nil {
			return err
		}
		keys, err := c.eng.Take(ctx, TakeParams{Now: now, Limit: c.opts.Batch, DryRun: dry, Lease: lease})
		if err != nil {
			return fmt.Errorf("gc sweep: take: %w", err)
		}
		if len(keys) == 0 {
			return nil
		}
		rep.Taken += int64(len(keys))
		verdicts, err := c.eng.Arbitrate(ctx, ArbitrateParams{Keys: keys, Now: c.now(), DryRun: dry, Lease: lease})
		if err == nil && len(verdicts) != len(keys) {
			err = fmt.Errorf("engine answered %d verdicts for %d keys", len(verdicts), len(keys))
		}
		if err != nil {
			err = fmt.Errorf("gc sweep: arbitrate %d keys from %s: %w", len(keys), keys[0], err)
			if !dry {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restageTimeout)
				defer cancel()
				if serr := c.restage(rctx, lease, keys); serr != nil {
					err = errors.Join(err, fmt.Errorf("gc sweep: returning the batch to the window (the next pass stages it again): %w", serr))
				}
			}
			return err
		}
		for _, v := range verdicts {
			switch v.Outcome {
			case blob.Deleted:
				rep.Deleted++
				rep.BytesFreed += v.Size
			case blob.Protected, blob.Busy:
				rep.Rescued++
			case blob.Absent:
				rep.Absent++
			}
		}
		progress()
		// A dry run peeks the same candidates every time: one batch only.
		if len(keys) < c.opts.Batch || dry {
			return nil
		}
	}
}

// restage returns keys to the window, overdue at once, under lease and
// the fences every Stage keeps (CheckStage).
func (c *Collector) restage(ctx context.Context, lease Lease, keys []blob.Key) error {
	now := c.now()
	p := StageParams{Keys: keys, VisibleAfter: now, Lease: lease}
	if err := CheckStage(p, now); err != nil {
		return err
	}
	return c.eng.Stage(ctx, p)
}

// stage continues the staging pass from its durable cursor, a range at a
// time, until it wraps or has covered StagePerSweep keys. A completed pass
// is followed by a new one only once a grace has passed since it began. A
// dry run counts a whole pass from the first key and records nothing.
func (c *Collector) stage(ctx context.Context, held *heldLease, dry bool, rep *Report, progress func()) error {
	var after blob.Key
	budget := c.opts.StagePerSweep
	if !dry {
		pass, err := c.eng.StagePass(ctx)
		if err != nil {
			return fmt.Errorf("gc sweep: stage: %w", err)
		}
		now := c.nowOr(time.Now())
		if next := pass.Started.Add(c.opts.Grace); pass.After.IsZero() && !pass.Started.IsZero() && now.Before(next) {
			rep.NextPass = next
			return nil
		}
		after = pass.After
	} else {
		budget = math.MaxInt
	}
	for rep.Covered < int64(budget) {
		if err := held.keep(ctx); err != nil {
			return err
		}
		r, err := c.eng.StageRange(ctx, StageRangeParams{
			After: after, Limit: min(c.opts.StageRange, budget-int(rep.Covered)),
			Now: c.now(), Grace: c.opts.Grace, DryRun: dry, Lease: held.lease,
		})
		if err != nil {
			return fmt.Errorf("gc sweep: stage after %s: %w", after, err)
		}
		rep.Covered += r.Covered
		rep.Staged += r.Staged
		progress()
		if r.Last.IsZero() {
			rep.Wrapped = true
			return nil
		}
		after = r.Last
	}
	return nil
}

// Run sweeps every interval until ctx ends, reporting each sweep's result
// to report (which may be nil). It returns ctx's error.
func (c *Collector) Run(ctx context.Context, interval time.Duration, report func(Report, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		rep, err := c.Sweep(ctx, SweepOptions{})
		if report != nil && ctx.Err() == nil {
			report(rep, err)
		}
	}
}

// nowOr returns the injected clock's reading, or local when there is none.
func (c *Collector) nowOr(local time.Time) time.Time {
	if c.opts.Now == nil {
		return local.Truncate(time.Microsecond)
	}
	return c.now()
}

func (c *Collector) now() time.Time {
	if c.opts.Now == nil {
		return time.Time{}
	}
	return c.opts.Now().Truncate(time.Microsecond)
}

// RegisterSource registers a liveness source: a key it references is never
// deleted. A SQL source names a text column of a table in the store's
// database (its names are quoted, never interpreted; the table must exist,
// and stead never creates or alters it); it is recorded durably, so every
// sweeper of the store honours it. A Go-function source is consulted in
// process, by engines whose sweeps all run in this process; PostgreSQL
// refuses it. Errors wrap ErrInvalidArgument or ErrInvalidName.
func (c *Collector) RegisterSource(ctx context.Context, src Source) error {
	if err := checkSource(src, true); err != nil {
		return fmt.Errorf("gc register source: %w", err)
	}
	if err := c.eng.RegisterSource(ctx, src); err != nil {
		return fmt.Errorf("gc register source %s: %w", src, err)
	}
	return nil
}

// UnregisterSource removes a source; its references stop protecting keys.
// A Go-function source is named by its Name alone: a process that never
// registered it may so clear the mark an engine keeps of it.
func (c *Collector) UnregisterSource(ctx context.Context, src Source) error {
	if err := checkSource(src, false); err != nil {
		return fmt.Errorf("gc unregister source: %w", err)
	}
	if err := c.eng.UnregisterSource(ctx, src); err != nil {
		return fmt.Errorf("gc unregister source %s: %w", src, err)
	}
	return nil
}

// Sources lists the registered sources.
func (c *Collector) Sources(ctx context.Context) ([]Source, error) {
	srcs, err := c.eng.Sources(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc sources: %w", err)
	}
	return srcs, nil
}

func checkSource(src Source, needFunc bool) error {
	if src.IsSQL() || src.Schema != "" || src.Column != "" {
		if src.Name != "" || src.Referenced != nil {
			return fmt.Errorf("%w: a source is SQL (schema, table, column) or Go (name, function), not both", steaderr.ErrInvalidArgument)
		}
		for _, part := range []struct{ what, name string }{{"schema", src.Schema}, {"table", src.Table}, {"column", src.Column}} {
			switch {
			case part.name == "":
				return fmt.Errorf("%w: empty %s name", steaderr.ErrInvalidName, part.what)
			case len(part.name) > maxIdentLen:
				return fmt.Errorf("%w: %s name is %d bytes, the limit is %d", steaderr.ErrInvalidName, part.what, len(part.name), maxIdentLen)
			case !utf8.ValidString(part.name) || strings.IndexByte(part.name, 0) >= 0:
				return fmt.Errorf("%w: %s name %q: invalid UTF-8 or a NUL byte", steaderr.ErrInvalidName, part.what, part.name)
			}
		}
		return nil
	}
	if err := validate.Name("source name", src.Name); err != nil {
		return err
	}
	if src.Referenced == nil && needFunc {
		return fmt.Errorf("%w: source %q has no function", steaderr.ErrInvalidArgument, src.Name)
	}
	return nil
}

// ParseSource parses "schema.table(column)" into a SQL source. Names
// holding '.', '(' or ')' cannot be written this way: build the Source.
func ParseSource(s string) (Source, error) {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return Source{}, fmt.Errorf("%w: source %q: want schema.table(column)", steaderr.ErrInvalidArgument, s)
	}
	schema, table, ok := strings.Cut(s[:open], ".")
	src := Source{Schema: schema, Table: table, Column: s[open+1 : len(s)-1]}
	if !ok || strings.ContainsAny(src.Column, "()") || strings.ContainsAny(table, ".") {
		return Source{}, fmt.Errorf("%w: source %q: want schema.table(column)", steaderr.ErrInvalidArgument, s)
	}
	return src, checkSource(src, true)
}

// Explain says why key is kept or not: its blob, its pins (live or not),
// the sources referencing it and its window deadline.
func (c *Collector) Explain(ctx context.Context, key blob.Key) (Explanation, error) {
	if key.IsZero() {
		return Explanation{}, fmt.Errorf("gc explain: %w: zero key", steaderr.ErrInvalidKey)
	}
	x, err := c.eng.Explain(ctx, ExplainParams{Key: key, Now: c.now()})
	if err != nil {
		return Explanation{}, fmt.Errorf("gc explain %s: %w", key, err)
	}
	return x, nil
}

// Verdict summarizes x in a sentence.
func (x Explanation) Verdict() string {
	if !x.Stored {
		return "not stored"
	}
	var live []string
	for _, p := range x.Pins {
		if p.Expiry.After(x.Now) {
			live = append(live, fmt.Sprintf("pinned by %s until %s", p.Owner, p.Expiry.UTC().Format(time.RFC3339Nano)))
		}
	}
	var weak []string
	for _, r := range x.Refs {
		switch {
		case r.Weak:
			if r.Live(x.Now) {
				weak = append(weak, strconv.Quote(r.Name))
			}
		case r.Expiry.IsZero():
			live = append(live, fmt.Sprintf("named by ref %q", r.Name))
		case r.Live(x.Now):
			live = append(live, fmt.Sprintf("named by ref %q until %s", r.Name, r.Expiry.UTC().Format(time.RFC3339Nano)))
		}
	}
	for _, p := range x.Parents {
		live = append(live, "referenced by blob "+p.String())
	}
	for _, s := range x.Sources {
		live = append(live, "referenced by "+s)
	}
	var v string
	switch {
	case len(live) > 0:
		v = "kept: " + strings.Join(live, "; ")
	case x.Staged && !x.VisibleAfter.After(x.Now):
		v = "unprotected: the next sweep deletes it"
	case x.Staged:
		v = "unprotected: deletable from " + x.VisibleAfter.UTC().Format(time.RFC3339Nano)
	default:
		v = "unprotected: the next staging pass stages it"
	}
	if len(weak) > 0 {
		v += " (named by weak ref " + strings.Join(weak, ", ") + ", which keeps nothing)"
	}
	return v
}

// Pins calls yield for each pin in (key, owner) order until it returns
// false.
func (c *Collector) Pins(ctx context.Context, yield func(PinInfo) bool) error {
	if err := c.eng.Pins(ctx, PinsParams{Now: c.now()}, yield); err != nil {
		return fmt.Errorf("gc pins: %w", err)
	}
	return nil
}

// Window calls yield for each staged candidate in key order until it
// returns false.
func (c *Collector) Window(ctx context.Context, yield func(Candidate) bool) error {
	if err := c.eng.Window(ctx, yield); err != nil {
		return fmt.Errorf("gc window: %w", err)
	}
	return nil
}

// unsupported is the Backend of a Collector over nil.
type unsupported struct{}

func (unsupported) Reap(context.Context, NowParams) (Reaped, error) { return Reaped{}, errNoGC }
func (unsupported) Declared(context.Context) (bool, error)          { return false, errNoGC }
func (unsupported) Stage(context.Context, StageParams) error        { return errNoGC }
func (unsupported) StagePass(context.Context) (Pass, error)         { return Pass{}, errNoGC }
func (unsupported) StageRange(context.Context, StageRangeParams) (StagedRange, error) {
	return StagedRange{}, errNoGC
}
func (unsupported) Take(context.Context, TakeParams) ([]blob.Key, error) { return nil, errNoGC }
func (unsupported) Arbitrate(context.Context, ArbitrateParams) ([]blob.Verdict, error) {
	return nil, errNoGC
}
func (unsupported) AcquireSweep(context.Context, string) (Lease, bool, error) {
	return nil, false, errNoGC
}
func (unsupported) RegisterSource(context.Context, Source) error   { return errNoGC }
func (unsupported) UnregisterSource(context.Context, Source) error { return errNoGC }
func (unsupported) Sources(context.Context) ([]Source, error)      { return nil, errNoGC }
func (unsupported) Explain(context.Context, ExplainParams) (Explanation, error) {
	return Explanation{}, errNoGC
}
func (unsupported) Pins(context.Context, PinsParams, func(PinInfo) bool) error { return errNoGC }
func (unsupported) Window(context.Context, func(Candidate) bool) error         { return errNoGC }
func (unsupported) Stored(context.Context) (Stored, error)                     { return Stored{}, errNoGC }
