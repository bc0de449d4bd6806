package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/record"
)

// scenario is one load bench runs: op does one operation for worker w.
type scenario struct {
	name  string
	setup func(ctx context.Context) error
	op    func(ctx context.Context, w, i int) error
}

// Names the bench writes under. The group and the locks are the same for
// every run, so that the rows no store API removes (a registered group, a
// lock's fencing counter) do not pile up; records and blobs are the run's
// own and deleted after it.
const (
	benchGroup = "stead-bench"
	benchLocks = "stead-bench/lock/"
)

// benchPinTTL is how long the bench's puts pin their blobs: short, so that
// the bench may delete them soon after it ends.
const benchPinTTL = time.Second

// benchCleanupTimeout bounds the removal of what a bench wrote, which runs
// even after an interrupt.
const benchCleanupTimeout = time.Minute

func benchCommand(e *env) *cobra.Command {
	var (
		duration    time.Duration
		concurrency int
		size        int
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run a quick load against the store and print a summary",
		Long: `Run a quick built-in load against the store, one scenario at a time,
each for --duration with --concurrency workers: blob puts and gets, lock
acquire+release, record CAS saves and claims. Prints throughput and
latency per scenario, to size a database.

It writes blobs of content unique to the run, pinned for ` + benchPinTTL.String() + ` only,
records "stead-bench-RUN/N", locks "` + benchLocks + `N" and the group
"` + benchGroup + `". When it ends, even when interrupted, it deletes its records
and, once their pins lapse, its blobs; a blob something else protects by
then (another store's pin, a liveness source) it leaves, and counts. The
group and the locks stay (no command removes them) for the next run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if duration <= 0 || concurrency <= 0 || size <= 0 {
				return usageError("--duration, --concurrency and --size must be positive")
			}
			return bench(cmd.Context(), e, duration, concurrency, size)
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 2*time.Second, "how long each scenario runs")
	cmd.Flags().IntVar(&concurrency, "concurrency", 4, "workers per scenario")
	cmd.Flags().IntVar(&size, "size", 1024, "blob size in bytes")
	return cmd
}

// benchResult is one scenario's measure.
type benchResult struct {
	name      string
	ops, errs int
	took      time.Duration
	latencies []time.Duration
}

// benchWrites is what a bench wrote, or tried to, to delete after it.
type benchWrites struct {
	mu      sync.Mutex
	keys    []blob.Key // every key put, stored or not
	stored  []blob.Key // the keys whose put succeeded
	lastPut time.Time  // when the last put returned
	ids     []string
}

// put records a put of key, which stored it if ok.
func (w *benchWrites) put(key blob.Key, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys = append(w.keys, key)
	if ok {
		w.stored = append(w.stored, key)
	}
	w.lastPut = time.Now()
}

// key returns the i'th key stored, modulo their number; ok is false when
// none was.
func (w *benchWrites) key(i int) (blob.Key, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.stored) == 0 {
		return blob.Key{}, false
	}
	return w.stored[i%len(w.stored)], true
}

// benchDeleteRounds is how many times remove tries a blob it finds
// protected, a pin TTL apart: a put cut short by the client may still
// commit, and pin, on the server after the client gave up on it.
const benchDeleteRounds = 3

// remove deletes the records written, then each blob put once its pin has
// lapsed, and prints what it did. A blob still protected after
// benchDeleteRounds tries (by another store's pin or a liveness source) is
// left and counted; one found absent was never stored, or collected
// already.
func (w *benchWrites) remove(ctx context.Context, e *env, st *stead.Store) error {
	ctx, cancel := context.WithTimeout(ctx, benchCleanupTimeout)
	defer cancel()
	for _, id := range w.ids {
		if err := st.Records.Delete(ctx, id); err != nil {
			return fmt.Errorf("bench: deleting record %q: %w", id, err)
		}
	}
	bar := e.countBar("bench: deleting its blobs", int64(len(w.keys)), "blobs")
	defer bar.done()
	pending, deleted := w.keys, 0
	wait := time.Until(w.lastPut.Add(benchPinTTL))
	for round := 0; round < benchDeleteRounds && len(pending) > 0; round++ {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("bench: waiting for its pins to lapse: %w (%d blobs left)", ctx.Err(), len(pending))
		}
		wait = benchPinTTL
		var protected []blob.Key
		for i, key := range pending {
			err := st.Blobs.Delete(ctx, key)
			switch {
			case err == nil:
				deleted++
			case errors.Is(err, stead.ErrProtected):
				protected = append(protected, key)
				continue
			case !errors.Is(err, stead.ErrNotFound):
				return fmt.Errorf("bench: deleting blob %s: %w (%d blobs left)", key, err, len(pending)-i+len(protected))
			}
			bar.add(1)
		}
		pending = protected
	}
	bar.done()
	fmt.Fprintf(e.stdout, "\nremoved %d records and %d blobs", len(w.ids), deleted)
	if len(pending) > 0 {
		fmt.Fprintf(e.stdout, "; kept %d blobs that something else protects (stead gc collects them once nothing does)", len(pending))
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// bench runs the scenarios against a store of its own, whose puts pin for
// benchPinTTL, and removes what they wrote.
func bench(ctx context.Context, e *env, duration time.Duration, concurrency, size int) (err error) {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	run := "stead-bench-" + hex.EncodeToString(suffix[:])
	st, err := e.open(ctx, stead.WithPinTTL(benchPinTTL), stead.WithInstanceID(run))
	if err != nil {
		return err
	}
	defer st.Close()
	writes := &benchWrites{}
	defer func() {
		err = errors.Join(err, writes.remove(context.WithoutCancel(ctx), e, st))
	}()
	value := func(w, i int) []byte {
		v := make([]byte, size)
		copy(v, fmt.Sprintf("%s/%d/%d", run, w, i))
		return v
	}
	recordID := func(w int) string { return fmt.Sprintf("%s/%d", run, w) }
	versions := make([]int64, concurrency)
	scenarios := []scenario{
		{name: "blob put", op: func(ctx context.Context, w, i int) error {
			v := value(w, i)
			key, err := st.Blobs.Put(ctx, bytes.NewReader(v))
			if err != nil {
				// It may have stored the value all the same (a put cut
				// by the scenario's deadline, say): delete it after.
				key = blob.KeyOf(v)
			}
			writes.put(key, err == nil)
			return err
		}},
		{name: "blob get", op: func(ctx context.Context, w, i int) error {
			key, ok := writes.key(w*7919 + i)
			if !ok {
				return nil
			}
			rd, err := st.Blobs.Get(ctx, key)
			if err != nil {
				return err
			}
			return rd.Close()
		}},
		{name: "lock acquire+release", op: func(ctx context.Context, w, i int) error {
			lk, ok, err := st.Locks.TryLock(ctx, fmt.Sprintf("%s%d", benchLocks, w), run, time.Minute)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("lock %s%d is held by another owner", benchLocks, w)
			}
			_, err = lk.Release(ctx)
			return err
		}},
		{name: "record save (CAS)", setup: func(ctx context.Context) error {
			if err := st.Records.RegisterGroup(ctx, benchGroup); err != nil {
				return err
			}
			for w := range versions {
				rec, err := st.Records.Save(ctx, record.Record{ID: recordID(w), Group: benchGroup, Status: record.Suspended})
				if err != nil {
					return err
				}
				writes.ids = append(writes.ids, rec.ID)
				versions[w] = rec.Version
			}
			return nil
		}, op: func(ctx context.Context, w, i int) error {
			rec, err := st.Records.Save(ctx, record.Record{ID: recordID(w), Group: benchGroup, Status: record.Suspended, Version: versions[w], Payload: value(w, i)[:min(size, 256)]})
			if err == nil {
				versions[w] = rec.Version
			}
			return err
		}},
		{name: "record claim", op: func(ctx context.Context, w, i int) error {
			_, err := st.Records.Claim(ctx, benchGroup, recordID(w), run, time.Minute)
			return err
		}},
	}
	bar := e.timeBar("bench", time.Duration(len(scenarios))*duration)
	defer bar.done()
	var results []benchResult
	for _, sc := range scenarios {
		bar.describe("bench: " + sc.name)
		if sc.setup != nil {
			if err := sc.setup(ctx); err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
		}
		res := runScenario(ctx, sc, duration, concurrency, bar)
		if err := ctx.Err(); err != nil {
			return err
		}
		results = append(results, res)
	}
	bar.done()
	printBench(e, results, concurrency, size)
	return nil
}

func runScenario(ctx context.Context, sc scenario, duration time.Duration, concurrency int, bar *bar) benchResult {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	res := benchResult{name: sc.name}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := range concurrency {
		wg.Go(func() {
			var lat []time.Duration
			errs := 0
			for i := 0; ctx.Err() == nil; i++ {
				t := time.Now()
				err := sc.op(ctx, w, i)
				if ctx.Err() != nil {
					break // an operation cut by the deadline is not counted
				}
				if err != nil {
					errs++
					continue
				}
				lat = append(lat, time.Since(t))
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.errs += errs
			mu.Unlock()
		})
	}
	if bar != nil {
		tick := time.NewTicker(100 * time.Millisecond)
		last := start
		for done := false; !done; {
			select {
			case <-ctx.Done():
				done = true
			case now := <-tick.C:
				bar.add(now.Sub(last).Milliseconds())
				last = now
			}
		}
		tick.Stop()
	}
	wg.Wait()
	res.took = time.Since(start)
	res.ops = len(res.latencies)
	slices.Sort(res.latencies)
	return res
}

func printBench(e *env, results []benchResult, concurrency, size int) {
	fmt.Fprintf(e.stdout, "stead bench: %s, %d workers, %d-byte blobs\n\n", redacted(e.db), concurrency, size)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tops\tops/s\tp50\tp99\terrors\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%d\t\n", r.name, r.ops, float64(r.ops)/r.took.Seconds(), quantile(r.latencies, 0.50), quantile(r.latencies, 0.99), r.errs)
	}
	tw.Flush()
}

func quantile(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(time.Microsecond).String()
}
