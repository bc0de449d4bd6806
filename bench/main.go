// Command bench measures stead side by side with raw drivers and peer
// libraries in one run, and prints ops/s and ratios. It is not a test:
// speed goals live here and in docs/BENCHMARKS.md.
//
//	cd bench && go run . -pg postgres://postgres@127.0.0.1:5432/postgres
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/steadkit/stead"
)

var (
	pgURL    = flag.String("pg", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server (a scratch schema per scenario is created and dropped)")
	duration = flag.Duration("duration", 3*time.Second, "how long each scenario runs per round")
	rounds   = flag.Int("rounds", 3, "rounds; each scenario reports its median round")
	only     = flag.String("only", "", "comma-separated groups to run (blob-pg, blob-sqlite, inline-pg, lock-pg, lock-sqlite, record-pg); empty runs all but inline-pg")
	callers  = flag.String("callers", "1,16", "comma-separated concurrent caller counts")
)

// scenario is one measured workload.
type scenario struct {
	group string // results are compared within a group
	name  string
	base  string // the scenario this one's ratio is against, or ""
	setup setupFunc
	// drain, set instead of setup, measures draining a queue filled by
	// setup: op handles a batch and returns its size, 0 once the queue is
	// empty. The rate is items/s until every caller found it empty.
	drain func(ctx context.Context, callers int) (op func(ctx context.Context, worker, i int) (int, error), cleanup func(), err error)
}

// setupFunc prepares a workload for a number of callers and returns its
// operation, called concurrently (worker is the caller's index, i counts its
// operations), and a cleanup.
type setupFunc = func(ctx context.Context, callers int) (op opFunc, cleanup func(), err error)

type opFunc = func(ctx context.Context, worker, i int) error

// opener opens a fresh, empty stead store and returns it with its cleanup.
type opener = func(ctx context.Context) (*stead.Store, func(), error)

type result struct {
	sc      scenario
	callers int
	opsPerS []float64
}

func main() {
	flag.Parse()
	ctx := context.Background()
	var ns []int
	for _, f := range strings.Split(*callers, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			fatalf("bad -callers %q", *callers)
		}
		ns = append(ns, n)
	}
	var scs []scenario
	for _, sc := range allScenarios() {
		if *only == "" && sc.group != "inline-pg" || slices.Contains(strings.Split(*only, ","), sc.group) {
			scs = append(scs, sc)
		}
	}
	results := map[string]*result{}
	var order []string
	for round := 0; round < *rounds; round++ {
		for _, n := range ns {
			for _, sc := range scs {
				id := fmt.Sprintf("%s/%s/%d", sc.group, sc.name, n)
				r := results[id]
				if r == nil {
					r = &result{sc: sc, callers: n}
					results[id] = r
					order = append(order, id)
				}
				ops, err := run(ctx, sc, n)
				if err != nil {
					fatalf("%s: %v", id, err)
				}
				r.opsPerS = append(r.opsPerS, ops)
				fmt.Fprintf(os.Stderr, "round %d %-40s %10.0f ops/s\n", round+1, id, ops)
			}
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	// ratio compares medians; paired is the median of each round's ratio
	// to the base run just before it, which cancels slow drift in a shared
	// machine's load.
	fmt.Fprintf(w, "group\tscenario\tcallers\tops/s (median)\tvs\tratio\tpaired\t\n")
	for _, id := range order {
		r := results[id]
		med := median(r.opsPerS)
		ratio, paired, vs := "", "", ""
		if r.sc.base != "" {
			if b := results[fmt.Sprintf("%s/%s/%d", r.sc.group, r.sc.base, r.callers)]; b != nil {
				vs = r.sc.base
				ratio = fmt.Sprintf("%.2fx", med/median(b.opsPerS))
				perRound := make([]float64, len(r.opsPerS))
				for i := range perRound {
					perRound[i] = r.opsPerS[i] / b.opsPerS[i]
				}
				paired = fmt.Sprintf("%.2fx", median(perRound))
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t\n", r.sc.group, r.sc.name, r.callers, med, vs, ratio, paired)
	}
	w.Flush()
}

// run measures one scenario at n callers for -duration; a drain scenario
// ends sooner, when every caller found its queue empty.
func run(ctx context.Context, sc scenario, n int) (float64, error) {
	var op func(ctx context.Context, worker, i int) (int, error)
	var cleanup func()
	var err error
	if sc.drain != nil {
		op, cleanup, err = sc.drain(ctx, n)
	} else {
		var each opFunc
		each, cleanup, err = sc.setup(ctx, n)
		op = func(ctx context.Context, w, i int) (int, error) { return 1, each(ctx, w, i) }
	}
	if err != nil {
		return 0, err
	}
	defer cleanup()
	var total atomic.Int64
	var firstErr atomic.Value
	runCtx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Go(func() {
			for i := 0; runCtx.Err() == nil; i++ {
				items, err := op(runCtx, w, i)
				if err != nil {
					if runCtx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
						cancel()
					}
					return
				}
				if items == 0 {
					return
				}
				total.Add(int64(items))
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

func allScenarios() []scenario {
	var all []scenario
	all = append(all, blobPostgres()...)
	all = append(all, blobSQLite()...)
	all = append(all, inlinePostgres()...)
	all = append(all, lockPostgres()...)
	all = append(all, lockSQLite()...)
	all = append(all, recordPostgres()...)
	return all
}
