package lockstress

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/lock"
)

// workerEnv carries a worker's spec, as JSON, to a re-executed test binary.
// Once connected the worker prints ready and reads the end of the run, in
// RFC 3339 form, from its stdin.
const (
	workerEnv = "STEAD_LOCKSTRESS_WORKER"
	ready     = "ready"
)

// spec is what a worker process runs.
type spec struct {
	ID         int
	StoreURL   string // the stead store
	Resource   string // "postgres" or "sqlite": how to reach the resource table
	ResourceDB string // a postgres:// URL or a SQLite file path
	Table      string // the resource table, quoted and qualified as needed
	Names      []string
	Goroutines int
	TTL        time.Duration
	History    string // the file events are appended to
	Seed       uint64 // of the worker's random choices
}

// event is one line of a worker's history: the call or the return of an
// operation. Times are the host's wall clock in Unix nanoseconds, shared by
// every process (and the database) on the host; DB times come from the
// database's clock.
type event struct {
	Ret    bool   // false: the call, true: the return
	Op     string // a worker-unique id
	Kind   string // acquire, write, renew, release
	Name   string
	Owner  string
	Token  int64 // the token written, renewed or released; the token granted
	T      int64
	OK     bool   // granted, accepted, renewed, released
	Err    string // the outcome is unknown
	Zombie bool   // a write made on purpose after the holder's lease lapsed
	Until  int64  // after a grant or renewal: until when the holder may act
	Expiry int64  // after a grant or renewal: the lease's expiry, DB clock, µs
	DBNow  int64  // a grant's DB now, an accepted write's DB time, µs
}

// runWorker runs the worker described by raw and returns its exit code.
func runWorker(raw string) int {
	var sp spec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		fmt.Fprintln(os.Stderr, "worker spec:", err)
		return 2
	}
	if err := work(sp); err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", sp.ID, err)
		return 1
	}
	return 0
}

type worker struct {
	spec
	until time.Time
	st    *stead.Store
	res   resource
	mu    sync.Mutex // serializes history writes
	out   *os.File
	seq   int
}

func work(sp spec) error {
	ctx := context.Background()
	out, err := os.OpenFile(sp.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	// The test migrated the store. Sessions may be terminated while
	// connecting: retry, for as long as it takes.
	var st *stead.Store
	var res resource
	for {
		if st == nil {
			st, err = stead.Open(ctx, sp.StoreURL, stead.WithoutMigrate())
		}
		if err == nil {
			res, err = openResource(ctx, sp)
		}
		if err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer st.Close()
	defer res.close()
	// Ready: the test answers with the end of the run.
	fmt.Println(ready)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the end of the run: %w", err)
	}
	until, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(line))
	if err != nil {
		return err
	}
	w := &worker{spec: sp, until: until, st: st, res: res, out: out}
	var wg sync.WaitGroup
	for g := range sp.Goroutines {
		wg.Go(func() { w.loop(ctx, g) })
	}
	wg.Wait()
	return nil
}

// call records the call of the operation ev describes, giving it an id;
// its return is recorded with ret.
func (w *worker) call(ev event) *event {
	w.mu.Lock()
	w.seq++
	ev.Op = fmt.Sprintf("w%d.%d", w.ID, w.seq)
	w.mu.Unlock()
	w.log(&ev)
	return &ev
}

// log appends ev, stamped now, with one write: a worker killed at any
// moment leaves whole lines.
func (w *worker) log(ev *event) {
	ev.T = time.Now().UnixNano()
	line, _ := json.Marshal(ev)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.out.Write(append(line, '\n')); err != nil {
		panic(err)
	}
}

// ret records the return of the operation called as ev.
func (w *worker) ret(ev *event, err error) {
	ev.Ret = true
	if err != nil {
		ev.OK, ev.Err = false, err.Error()
	}
	w.log(ev)
}

// loop acquires random names as fresh owners, holds them for a while and
// lets them go, until the worker's end.
func (w *worker) loop(ctx context.Context, g int) {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(g)))
	for seq := 0; time.Now().Before(w.until); seq++ {
		name := w.Names[rng.IntN(len(w.Names))]
		// A fresh owner per grant: a same-owner re-acquire would return the
		// live grant rather than a new one.
		lk, until := w.acquire(ctx, rng, name, fmt.Sprintf("w%d.g%d.%d", w.ID, g, seq))
		if lk == nil {
			time.Sleep(upTo(rng, w.TTL/10))
			continue
		}
		w.hold(ctx, rng, lk, until)
	}
}

func (w *worker) acquire(ctx context.Context, rng *rand.Rand, name, owner string) (*lock.Lock, time.Time) {
	ev := w.call(event{Kind: "acquire", Name: name, Owner: owner})
	sent := time.Now()
	var lk *lock.Lock
	var err error
	if rng.IntN(2) == 0 {
		lk, _, err = w.st.Locks.TryLock(ctx, name, owner, w.TTL)
	} else {
		waitCtx, cancel := context.WithTimeout(ctx, 2*w.TTL)
		lk, err = w.st.Locks.Lock(waitCtx, name, owner, w.TTL)
		cancel()
	}
	if lk == nil {
		w.ret(ev, err)
		return nil, time.Time{}
	}
	until := sent.Add(w.TTL) // the lease lasts at least this long
	ev.OK, ev.Token, ev.Until = true, lk.Token(), until.UnixNano()
	ev.Expiry, ev.DBNow = lk.Expiry().UnixMicro(), lk.Expiry().Add(-w.TTL).UnixMicro()
	w.ret(ev, nil)
	return lk, until
}

// hold writes the token to the resource a few times while the lease is
// live, sometimes renewing it, then releases it, abandons it, or, as a
// zombie, writes again after it lapsed.
func (w *worker) hold(ctx context.Context, rng *rand.Rand, lk *lock.Lock, until time.Time) {
	for range 1 + rng.IntN(4) {
		if !time.Now().Before(until) {
			break
		}
		w.write(ctx, lk, false)
		if rng.IntN(3) == 0 {
			ev := w.call(event{Kind: "renew", Name: lk.Name(), Owner: lk.Owner(), Token: lk.Token()})
			sent := time.Now()
			ok, err := lk.Renew(ctx, w.TTL)
			if ok && time.Now().Before(until) {
				until = sent.Add(w.TTL)
				ev.OK, ev.Until, ev.Expiry = true, until.UnixNano(), lk.Expiry().UnixMicro()
			}
			w.ret(ev, err)
			if !ev.OK {
				return
			}
		}
		time.Sleep(upTo(rng, w.TTL/4))
	}
	switch rng.IntN(10) {
	case 0:
		time.Sleep(time.Until(until) + upTo(rng, w.TTL/2))
		w.write(ctx, lk, true)
	case 1:
		return // abandoned: the lease lapses
	}
	ev := w.call(event{Kind: "release", Name: lk.Name(), Owner: lk.Owner(), Token: lk.Token()})
	ok, err := lk.Release(ctx)
	ev.OK = ok
	w.ret(ev, err)
}

func (w *worker) write(ctx context.Context, lk *lock.Lock, zombie bool) {
	ev := w.call(event{Kind: "write", Name: lk.Name(), Owner: lk.Owner(), Token: lk.Token(), Zombie: zombie})
	accepted, at, err := w.res.write(ctx, lk.Name(), lk.Token())
	ev.OK = accepted
	if accepted {
		ev.DBNow = at.UnixMicro()
	}
	w.ret(ev, err)
}

// resource is the fenced resource: one row per lock name holding the
// largest token it accepted.
type resource interface {
	// write stores token for name if it is larger than the stored one,
	// reporting whether it was and, if so, the database time it was.
	write(ctx context.Context, name string, token int64) (bool, time.Time, error)
	close()
}

func openResource(ctx context.Context, sp spec) (resource, error) {
	if sp.Resource == "postgres" {
		pool, err := pgxpool.New(ctx, sp.ResourceDB)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			return nil, err
		}
		q := "UPDATE " + sp.Table + " SET token = $2, at = clock_timestamp() WHERE name = $1 AND token < $2 RETURNING at"
		return &pgResource{pool: pool, update: q}, nil
	}
	db, err := sql.Open("sqlite", "file:"+sp.ResourceDB+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	q := "UPDATE " + sp.Table + " SET token = ?2, at = ?3 WHERE name = ?1 AND token < ?2"
	return &sqliteResource{db: db, update: q}, nil
}

type pgResource struct {
	pool   *pgxpool.Pool
	update string
}

func (r *pgResource) write(ctx context.Context, name string, token int64) (bool, time.Time, error) {
	rows, err := r.pool.Query(ctx, r.update, name, token)
	if err != nil {
		return false, time.Time{}, err
	}
	defer rows.Close()
	var at time.Time
	accepted := rows.Next()
	if accepted {
		err = rows.Scan(&at)
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	return accepted && err == nil, at, err
}

func (r *pgResource) close() { r.pool.Close() }

type sqliteResource struct {
	db     *sql.DB
	update string
}

func (r *sqliteResource) write(ctx context.Context, name string, token int64) (bool, time.Time, error) {
	at := time.Now()
	res, err := r.db.ExecContext(ctx, r.update, name, token, at.UnixMicro())
	if err != nil {
		return false, time.Time{}, err
	}
	n, err := res.RowsAffected()
	return n == 1 && err == nil, at, err
}

func (r *sqliteResource) close() { r.db.Close() }

// upTo returns a random duration in [0, d).
func upTo(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(max(d, 1))))
}
