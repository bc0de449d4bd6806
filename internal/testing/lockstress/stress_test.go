package lockstress

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

var soak = flag.Duration("locks.soak", 0, "run each lock stress scenario this long (default: a short run)")

func TestMain(m *testing.M) {
	if raw := os.Getenv(workerEnv); raw != "" {
		os.Exit(runWorker(raw))
	}
	pgtest.Main(m)
}

const (
	shortRun   = 3 * time.Second
	workers    = 3
	goroutines = 4
	leaseTTL   = 150 * time.Millisecond
)

var names = []string{"alpha", "beta", "gamma"}

// target is a database to stress: how workers reach it, and how the test
// reads the resource afterwards.
type target struct {
	storeURL   func(worker int) string
	resource   string
	resourceDB func(worker int) string
	table      string
	final      func(ctx context.Context) (map[string]int64, error)
	// terminate ends one random database session of the workers; nil when
	// the database has no sessions to end.
	terminate func(ctx context.Context) error
}

// chaos is what happens to the workers while they run.
type chaos int

const (
	calm      chaos = iota
	sigkill         // workers are killed with SIGKILL and replaced
	terminate       // the workers' database sessions are terminated
)

func runLength() time.Duration {
	if *soak > 0 {
		return *soak
	}
	return shortRun
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		chaos chaos
	}{{"Calm", calm}, {"SIGKILL", sigkill}, {"TerminateBackend", terminate}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run(t, pgTarget(t), c.chaos)
		})
	}
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		chaos chaos
	}{{"Calm", calm}, {"SIGKILL", sigkill}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run(t, sqliteTarget(t), c.chaos)
		})
	}
}

func pgTarget(t *testing.T) target {
	db := pgtest.New(t)
	ctx := t.Context()
	st, err := stead.Open(ctx, db.StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	table := pgx.Identifier{db.Schema, "resource"}.Sanitize()
	if _, err := db.Admin.Exec(ctx, "CREATE TABLE "+table+" (name text PRIMARY KEY, token bigint NOT NULL, at timestamptz)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Admin.Exec(ctx, "INSERT INTO "+table+" SELECT unnest($1::text[]), 0", names); err != nil {
		t.Fatal(err)
	}
	tag := func(u string, w int) string {
		return u + "&application_name=" + fmt.Sprintf("lockstress_%d_%s", w, db.Schema[len(db.Schema)-8:])
	}
	return target{
		storeURL:   func(w int) string { return tag(db.StoreURL(), w) + "&pool_max_conns=4" },
		resource:   "postgres",
		resourceDB: func(w int) string { return tag(db.URL, w) + "&pool_max_conns=4" },
		table:      table,
		final: func(ctx context.Context) (map[string]int64, error) {
			rows, _ := db.Admin.Query(ctx, "SELECT name, token FROM "+table)
			final := map[string]int64{}
			var name string
			var token int64
			_, err := pgx.ForEachRow(rows, []any{&name, &token}, func() error { final[name] = token; return nil })
			return final, err
		},
		terminate: func(ctx context.Context) error {
			_, err := db.Admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name LIKE 'lockstress\_%\_' || $1 ORDER BY random() LIMIT 1`, db.Schema[len(db.Schema)-8:])
			return err
		},
	}
}

func sqliteTarget(t *testing.T) target {
	path := filepath.Join(t.TempDir(), "stress.db")
	ctx := t.Context()
	st, err := stead.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, "CREATE TABLE resource (name TEXT PRIMARY KEY, token INTEGER NOT NULL, at INTEGER)"); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := db.ExecContext(ctx, "INSERT INTO resource VALUES (?, 0, NULL)", n); err != nil {
			t.Fatal(err)
		}
	}
	return target{
		storeURL:   func(int) string { return "sqlite://" + path },
		resource:   "sqlite",
		resourceDB: func(int) string { return path },
		table:      "resource",
		final: func(ctx context.Context) (map[string]int64, error) {
			rows, err := db.QueryContext(ctx, "SELECT name, token FROM resource")
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			final := map[string]int64{}
			for rows.Next() {
				var name string
				var token int64
				if err := rows.Scan(&name, &token); err != nil {
					return nil, err
				}
				final[name] = token
			}
			return final, rows.Err()
		},
	}
}

// proc is one running worker process.
type proc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer  // the worker's other output; read after done
	ready chan struct{} // closed when the worker is connected
	done  chan error
}

func spawn(t *testing.T, tg target, id int, dir string, seed uint64) *proc {
	t.Helper()
	raw, err := json.Marshal(spec{
		ID: id, StoreURL: tg.storeURL(id), Resource: tg.resource, ResourceDB: tg.resourceDB(id), Table: tg.table,
		Names: names, Goroutines: goroutines, TTL: leaseTTL,
		History: filepath.Join(dir, fmt.Sprintf("w%d.jsonl", id)), Seed: seed,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{id: id, ready: make(chan struct{}), done: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	p.cmd.Stderr = &p.out
	stdout, err := p.cmd.StdoutPipe()
	if err == nil {
		p.stdin, err = p.cmd.StdinPipe()
	}
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		t.Fatalf("starting worker %d: %v", id, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == ready {
				close(p.ready)
			}
		}
		p.done <- p.cmd.Wait()
	}()
	return p
}

// start tells p when the run ends.
func (p *proc) start(t *testing.T, until time.Time) {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, until.Format(time.RFC3339Nano)); err != nil {
		t.Fatalf("worker %d: %v", p.id, err)
	}
}

func isReady(p *proc) bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

// run runs workers against tg for the run's length under the given chaos,
// then checks their history.
func run(t *testing.T, tg target, ch chaos) {
	ctx := t.Context()
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	procs := map[int]*proc{}
	for id := range workers {
		procs[id] = spawn(t, tg, id, dir, rng.Uint64())
	}
	for _, p := range procs {
		select {
		case <-p.ready:
		case err := <-p.done:
			t.Fatalf("worker %d: %v\n%s", p.id, err, p.out.String())
		case <-time.After(time.Minute):
			t.Fatalf("worker %d not ready within a minute", p.id)
		}
	}
	until := time.Now().Add(runLength())
	for _, p := range procs {
		p.start(t, until)
	}
	killed := map[int]int64{} // worker → when it was dead for sure
	next, terminated := workers, 0
	for {
		pause := time.Until(until)
		switch ch {
		case sigkill:
			pause = min(pause, 200*time.Millisecond+upTo(rng, 400*time.Millisecond))
		case terminate:
			pause = min(pause, 50*time.Millisecond+upTo(rng, 150*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(pause):
		}
		if !time.Now().Before(until) {
			break
		}
		switch ch {
		case sigkill:
			// Kill only when every worker is running, so that replacements
			// slow to connect do not leave the run without workers.
			var running []*proc
			for _, p := range procs {
				if isReady(p) {
					running = append(running, p)
				}
			}
			if len(running) < len(procs) {
				continue
			}
			p := running[rng.IntN(len(running))]
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-p.done
			killed[p.id] = time.Now().UnixNano()
			delete(procs, p.id)
			procs[next] = spawn(t, tg, next, dir, rng.Uint64())
			procs[next].start(t, until)
			next++
		case terminate:
			if err := tg.terminate(ctx); err != nil {
				t.Fatal(err)
			}
			terminated++
		}
	}
	for _, p := range procs {
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("worker %d: %v\n%s", p.id, err, p.out.String())
			}
		case <-time.After(time.Minute):
			p.cmd.Process.Kill()
			t.Errorf("worker %d still running a minute after the end", p.id)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	final, err := tg.final(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := loadHistory(t, dir, next, killed)
	t.Logf("%v, %d worker processes (%d killed), %d sessions terminated", runLength(), next, len(killed), terminated)
	check(t, h, final)
}
