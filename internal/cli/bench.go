package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
latency per scenario, to size a database. It writes to the store under
names starting "stead-bench-" and removes what it wrote.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if duration <= 0 || concurrency <= 0 || size <= 0 {
				return usageError("--duration, --concurrency and --size must be positive")
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				return bench(cmd.Context(), e, st, duration, concurrency, size)
			})
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

func bench(ctx context.Context, e *env, st *stead.Store, duration time.Duration, concurrency, size int) error {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	prefix := "stead-bench-" + hex.EncodeToString(suffix[:])
	group := prefix
	var (
		mu   sync.Mutex
		keys []blob.Key
	)
	value := func(w, i int) []byte {
		v := make([]byte, size)
		copy(v, fmt.Sprintf("%s/%d/%d", prefix, w, i))
		return v
	}
	versions := make([]int64, concurrency)
	scenarios := []scenario{
		{name: "blob put", op: func(ctx context.Context, w, i int) error {
			key, err := st.Blobs.Put(ctx, bytes.NewReader(value(w, i)))
			if err == nil {
				mu.Lock()
				keys = append(keys, key)
				mu.Unlock()
			}
			return err
		}},
		{name: "blob get", op: func(ctx context.Context, w, i int) error {
			mu.Lock()
			if len(keys) == 0 {
				mu.Unlock()
				return nil
			}
			key := keys[(w*7919+i)%len(keys)]
			mu.Unlock()
			rd, err := st.Blobs.Get(ctx, key)
			if err != nil {
				return err
			}
			return rd.Close()
		}},
		{name: "lock acquire+release", op: func(ctx context.Context, w, i int) error {
			lk, ok, err := st.Locks.TryLock(ctx, fmt.Sprintf("%s/%d", prefix, w), prefix, time.Minute)
			if err != nil || !ok {
				return err
			}
			_, err = lk.Release(ctx)
			return err
		}},
		{name: "record save (CAS)", setup: func(ctx context.Context) error {
			if err := st.Records.RegisterGroup(ctx, group); err != nil {
				return err
			}
			for w := range versions {
				rec, err := st.Records.Save(ctx, record.Record{ID: fmt.Sprintf("%s/%d", prefix, w), Group: group, Status: record.Suspended})
				if err != nil {
					return err
				}
				versions[w] = rec.Version
			}
			return nil
		}, op: func(ctx context.Context, w, i int) error {
			rec, err := st.Records.Save(ctx, record.Record{ID: fmt.Sprintf("%s/%d", prefix, w), Group: group, Status: record.Suspended, Version: versions[w], Payload: value(w, i)[:min(size, 256)]})
			if err == nil {
				versions[w] = rec.Version
			}
			return err
		}},
		{name: "record claim", op: func(ctx context.Context, w, i int) error {
			_, err := st.Records.Claim(ctx, group, fmt.Sprintf("%s/%d", prefix, w), prefix, time.Minute)
			return err
		}},
	}
	bar := e.timeBar("bench", time.Duration(len(scenarios))*duration)
	var results []benchResult
	for _, sc := range scenarios {
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
	// Remove what the bench wrote.
	cleanup := context.WithoutCancel(ctx)
	for w := range versions {
		_ = st.Records.Delete(cleanup, fmt.Sprintf("%s/%d", prefix, w))
	}
	for _, key := range keys {
		_ = st.Blobs.Delete(cleanup, key)
	}
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
