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
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead"
)

var (
	pgURL    = flag.String("pg", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server (a scratch schema per scenario is created and dropped)")
	duration = flag.Duration("duration", 3*time.Second, "how long each steady scenario runs per round")
	drainCap = flag.Duration("draincap", 2*time.Minute, "the longest a drain scenario may take to empty its queue")
	rounds   = flag.Int("rounds", 3, "rounds; a group's scenarios take turns each round, and each reports its median round")
	only     = flag.String("only", "", "comma-separated groups to run (blob-pg, blob-sqlite, inline-pg, chunkstore-pg, large-pg, large-sqlite, sizes-pg, lock-pg, lock-sqlite, record-pg, gc-pg, gc-sweep, gc-sweep-sqlite, refs-pg, children-pg, oci-sqlite, oci-pg, oci-large-sqlite, oci-large-pg, large-tier, oci-chunked, oci-dist, oci-dist-large, oci-dist-gc, oci-dist-untag, cache-grpc, cache-grpc-large, cache-http); empty runs all but the on-demand groups (inline-pg, chunkstore-pg, large-pg, large-sqlite, large-tier, oci-chunked, sizes-pg, gc-sweep, gc-sweep-sqlite, oci-*, cache-*)")
	callers  = flag.String("callers", "1,16", "comma-separated concurrent caller counts")
	cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	blockpro = flag.String("blockprofile", "", "write a profile of where goroutines blocked over the whole run to this file")
	mutexpro = flag.String("mutexprofile", "", "write a profile of contended mutexes over the whole run to this file")
	settle   = flag.Duration("settle", 5*time.Minute, "before each group, wait up to this long for the 1-minute load average to fall to 2 or below (0: do not wait)")
)

// onDemand are the groups that run only when named in -only: they measure
// design choices or take long.
var onDemand = []string{"inline-pg", "chunkstore-pg", "large-pg", "large-sqlite", "sizes-pg", "gc-sweep", "gc-sweep-sqlite", "oci-sqlite", "oci-pg", "oci-large-sqlite", "oci-large-pg", "large-tier", "oci-chunked", "oci-dist", "oci-dist-large", "oci-dist-gc", "oci-dist-untag", "cache-grpc", "cache-grpc-large", "cache-http"}

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
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fatalf("%v", err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *blockpro != "" {
		runtime.SetBlockProfileRate(1)
		defer writeProfile("block", *blockpro)
	}
	if *mutexpro != "" {
		runtime.SetMutexProfileFraction(1)
		defer writeProfile("mutex", *mutexpro)
	}
	var ns []int
	for _, f := range strings.Split(*callers, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			fatalf("bad -callers %q", *callers)
		}
		ns = append(ns, n)
	}
	if *rounds < 1 {
		fatalf("bad -rounds %d", *rounds)
	}
	all := allScenarios()
	var scs []scenario
	for _, sc := range all {
		if *only == "" && !slices.Contains(onDemand, sc.group) || slices.Contains(strings.Split(*only, ","), sc.group) {
			scs = append(scs, sc)
		}
	}
	if *only != "" {
		for _, g := range strings.Split(*only, ",") {
			if !slices.ContainsFunc(all, func(sc scenario) bool { return sc.group == g }) {
				fatalf("unknown group %q in -only", g)
			}
		}
	}
	results := map[string]*result{}
	var order []string
	var loads []groupLoad
	for _, group := range groupsOf(scs) {
		for _, n := range ns {
			for _, sc := range group {
				id := fmt.Sprintf("%s/%s/%d", sc.group, sc.name, n)
				results[id] = &result{sc: sc, callers: n}
				order = append(order, id)
			}
			gl := groupLoad{group: group[0].group, callers: n, before: settleLoad(*settle)}
			fmt.Fprintf(os.Stderr, "%s/%d: loadavg %.2f before\n", gl.group, n, gl.before)
			if err := runGroup(ctx, group, n, func(sc scenario, round int, ops float64) {
				id := fmt.Sprintf("%s/%s/%d", sc.group, sc.name, n)
				results[id].opsPerS = append(results[id].opsPerS, ops)
				fmt.Fprintf(os.Stderr, "round %d %-40s %10.2f ops/s\n", round+1, id, ops)
			}); err != nil {
				fatalf("%s at %d callers: %v", group[0].group, n, err)
			}
			gl.after = loadavg()
			fmt.Fprintf(os.Stderr, "%s/%d: loadavg %.2f after\n", gl.group, n, gl.after)
			loads = append(loads, gl)
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	// ratio compares medians; paired is the median of each round's ratio
	// to its base, measured in the same round, which cancels slow drift in
	// a shared machine's load.
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
				paired = fmt.Sprintf("%.2fx (%.2f-%.2f)", median(perRound), slices.Min(perRound), slices.Max(perRound))
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t\n", r.sc.group, r.sc.name, r.callers, med, vs, ratio, paired)
	}
	w.Flush()
	printLoads(loads)
	printRSS()
	printTierRows()
	printChunkRows()
	printGCResults()
	printUntagResults()
}

// groupsOf splits scenarios into their groups, in order.
func groupsOf(scs []scenario) [][]scenario {
	var groups [][]scenario
	for _, sc := range scs {
		if len(groups) == 0 || groups[len(groups)-1][0].group != sc.group {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], sc)
	}
	return groups
}

// runGroup measures a group's scenarios at n callers for -rounds rounds.
// Steady scenarios are set up once, so their rounds interleave on the same
// tables and pools and differ only in time; a drain scenario is set up
// again each round, since a round empties its queue.
func runGroup(ctx context.Context, group []scenario, n int, report func(sc scenario, round int, ops float64)) error {
	steady := make([]opFunc, len(group))
	for i, sc := range group {
		if sc.setup == nil {
			continue
		}
		op, cleanup, err := sc.setup(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		defer cleanup()
		steady[i] = op
	}
	for round := 0; round < *rounds; round++ {
		// Each round starts one scenario later, so that no scenario always
		// follows the same one and inherits what it left behind.
		for k := range group {
			i := (round + k) % len(group)
			sc := group[i]
			ops, err := runRound(ctx, sc, steady[i], n, round)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			report(sc, round, ops)
		}
	}
	return nil
}

// runRound measures one round of one scenario: a steady one for -duration,
// a drain one until every caller found its queue empty (at most -draincap).
// A steady scenario's operations run to their end even past the deadline,
// since one cut off would leave state behind for the next round (a lock
// held, a version moved on); a drain's are cut off, its setup being
// discarded after the round. A steady scenario's operation numbers go on
// rising across rounds, so its values stay distinct; a drain scenario's
// start at 0 with its fresh setup.
func runRound(ctx context.Context, sc scenario, steady opFunc, n, round int) (float64, error) {
	var op func(ctx context.Context, worker, i int) (int, error)
	first := round << 32
	if sc.drain != nil {
		first = 0
		drain, cleanup, err := sc.drain(ctx, n)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		op = drain
	} else {
		op = func(ctx context.Context, w, i int) (int, error) { return 1, steady(ctx, w, i) }
	}
	if strings.HasSuffix(sc.group, "-pg") {
		if err := checkpoint(ctx); err != nil {
			return 0, err
		}
	}
	var total atomic.Int64
	var firstErr atomic.Value
	limit, opCtx := *duration, ctx
	runCtx, cancel := context.WithCancel(ctx)
	if sc.drain != nil {
		limit, opCtx = *drainCap, runCtx
	}
	timer := time.AfterFunc(limit, cancel)
	defer timer.Stop()
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Go(func() {
			for i := first; runCtx.Err() == nil; i++ {
				items, err := op(opCtx, w, i)
				if err != nil {
					if opCtx.Err() == nil {
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
	if sc.drain != nil && runCtx.Err() != nil {
		fmt.Fprintf(os.Stderr, "%s/%s/%d: the queue was not empty after -draincap %v\n", sc.group, sc.name, n, *drainCap)
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

// checkpoint flushes PostgreSQL's dirty buffers before a scenario is timed,
// so that no scenario pays for the writes of the one before it or of its
// own preload.
func checkpoint(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// roughLoad is the 1-minute load average above which a group's figures are
// marked rough: the machine has 2 cores, and a higher load means other work
// shared them (docs/BENCHMARKS.md records only figures that are not rough).
const roughLoad = 2.0

// groupLoad is the machine's load around one group at one caller count.
type groupLoad struct {
	group         string
	callers       int
	before, after float64 // 1-minute load average, -1 when unreadable
}

// settleLoad waits up to max for the 1-minute load average to fall to
// roughLoad or below, so that the last group's own load (16 callers keep
// both cores busy) or other work has died down, and returns the load it
// ends at.
func settleLoad(max time.Duration) float64 {
	deadline := time.Now().Add(max)
	for {
		l := loadavg()
		if l <= roughLoad || !time.Now().Before(deadline) {
			return l
		}
		fmt.Fprintf(os.Stderr, "loadavg %.2f: waiting for it to fall to %.1f or below\n", l, roughLoad)
		time.Sleep(10 * time.Second)
	}
}

// loadavg returns the 1-minute load average from /proc/loadavg, or -1 where
// there is none (not Linux).
func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var one float64
	if _, err := fmt.Sscan(string(b), &one); err != nil {
		return -1
	}
	return one
}

// printLoads prints each group's load average before and after it, and
// marks it "rough" when the load before it exceeded roughLoad: other work
// shared the cores ("unknown" when there is no load average to read). The
// load after includes the group's own callers (and the database serving
// them), so it is shown, not judged.
func printLoads(loads []groupLoad) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\ngroup\tcallers\tloadavg before\tafter\tfigures\t\n")
	for _, l := range loads {
		verdict := "quiet"
		switch {
		case l.before < 0 || l.after < 0:
			verdict = "unknown"
		case l.before > roughLoad:
			verdict = "rough"
		}
		fmt.Fprintf(w, "%s\t%d\t%.2f\t%.2f\t%s\t\n", l.group, l.callers, l.before, l.after, verdict)
	}
	w.Flush()
	fmt.Printf("(\"rough\": the 1-minute load average exceeded %.1f before the group, after waiting up to -settle for it to fall; other work shared the cores. The load after includes the group's own)\n", roughLoad)
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
	all = append(all, chunkStorePostgres()...)
	all = append(all, largeScenarios()...)
	all = append(all, tierScenarios()...)
	all = append(all, chunkedScenarios()...)
	all = append(all, lockPostgres()...)
	all = append(all, lockSQLite()...)
	all = append(all, recordPostgres()...)
	all = append(all, gcPostgres()...)
	all = append(all, refsPostgres()...)
	all = append(all, registryScenarios()...)
	all = append(all, distributionScenarios()...)
	all = append(all, cacheScenarios()...)
	return all
}

// writeProfile writes the named runtime profile to path.
func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		fatalf("%v", err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		fatalf("%s profile: %v", name, err)
	}
}
