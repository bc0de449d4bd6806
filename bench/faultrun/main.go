// Command faultrun drives writers through faults and then checks that
// every acknowledged write is there, intact: the shape of the fault run
// in docs/BENCHMARKS.md. Writers on PostgreSQL directly and through their
// own `stead serve` put blobs (inline and chunked) with 300 ms pins and
// name each in a ref, while every writer sweeps every 10 ms with a 20 ms
// grace; meanwhile backends of the database are terminated in a loop, and
// the servers are killed (SIGKILL) or stopped (SIGSTOP) and started again.
// A write is acknowledged when its ref's Set returned; afterwards each
// acknowledged ref must name its key (else lost) and the blob must hash to
// it (else corrupt), and no chunk row may be left without its blob or a
// live upload.
//
//	cd bench && go run ./faultrun -db 'postgres://postgres@127.0.0.1:5432/postgres?schema=faultrun&application_name=faultrun&sslmode=disable' -for 60s
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/ref"
)

var (
	dbURL     = flag.String("db", "", "postgres:// URL with a schema of the run's own (dropped first) and application_name=faultrun")
	runFor    = flag.Duration("for", time.Minute, "how long the writers run under faults")
	steadBin  = flag.String("stead", "", "the stead binary for the servers (default: built from ../cmd/stead)")
	terminate = flag.Duration("terminate-every", 50*time.Millisecond, "how often one backend is terminated")
	killEvery = flag.Duration("kill-every", 7*time.Second, "how often a server is killed or stopped")
)

type counts struct {
	acked, failed, terminated, kills, stops atomic.Int64
}

// acked is one acknowledged write: the ref name that keeps the key.
type acked struct {
	name string
	key  blob.Key
}

func main() {
	flag.Parse()
	if *dbURL == "" {
		log.Fatal("faultrun: -db is required")
	}
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(*dbURL)
	if err != nil {
		log.Fatal(err)
	}
	schema := cfg.RuntimeParams["schema"]
	if cfg.RuntimeParams["application_name"] != "faultrun" {
		log.Fatal("faultrun: the URL must set application_name=faultrun: only those backends are terminated")
	}
	admin, err := pgxpool.New(ctx, adminURL(*dbURL))
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	if schema == "" {
		log.Fatal("faultrun: the URL must name a schema of the run's own")
	}
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		log.Fatal(err)
	}
	st, err := stead.Open(ctx, *dbURL) // migrates
	if err != nil {
		log.Fatal(err)
	}
	st.Close()

	dir, err := os.MkdirTemp("", "faultrun-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := *steadBin
	if bin == "" {
		bin = filepath.Join(dir, "stead")
		build := exec.Command("go", "build", "-o", bin, "./cmd/stead")
		build.Dir, build.Stdout, build.Stderr = "..", os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			log.Fatalf("building stead: %v", err)
		}
	}
	servers := []*server{{bin: bin, db: *dbURL, addr: "127.0.0.1:17271", log: filepath.Join(dir, "serve1.log")},
		{bin: bin, db: *dbURL, addr: "127.0.0.1:17272", log: filepath.Join(dir, "serve2.log")}}
	for _, s := range servers {
		s.start()
	}

	var c counts
	var mu sync.Mutex
	var writes []acked
	runCtx, stop := context.WithTimeout(ctx, *runFor)
	defer stop()
	var wg sync.WaitGroup
	urls := []string{*dbURL, *dbURL, "http://" + servers[0].addr, "http://" + servers[1].addr}
	for w, url := range urls {
		wg.Go(func() {
			got := writer(runCtx, w, url, &c)
			mu.Lock()
			writes = append(writes, got...)
			mu.Unlock()
		})
	}
	wg.Go(func() { terminator(runCtx, admin, schema, &c) })
	wg.Go(func() { killer(runCtx, servers, &c) })
	wg.Wait()
	for _, s := range servers {
		s.stop()
	}

	lost, corrupt, orphans := check(ctx, writes, admin, schema)
	fmt.Printf("ran %v: %d writes acknowledged, %d failed under faults; %d backends terminated, %d server kills, %d server stops\n",
		*runFor, c.acked.Load(), c.failed.Load(), c.terminated.Load(), c.kills.Load(), c.stops.Load())
	fmt.Printf("checked %d acknowledged: %d lost, %d corrupt; %d orphan chunk rows\n", len(writes), lost, corrupt, orphans)
	if lost+corrupt+orphans > 0 {
		os.Exit(1)
	}
}

// adminURL is url without stead's own parameters.
func adminURL(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		log.Fatal(err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// writer puts blobs and names each in a ref until ctx ends, reopening its
// store when opening failed, and returns what it acknowledged.
func writer(ctx context.Context, w int, url string, c *counts) []acked {
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	var out []acked
	opts := []stead.Option{stead.WithPinTTL(300 * time.Millisecond), stead.WithGCGrace(20 * time.Millisecond),
		stead.WithGCAllUnreferenced(), stead.WithGC(10*time.Millisecond, func(gc.Report, error) {}),
		stead.WithLogger(slog.New(slog.DiscardHandler))}
	if w < 2 {
		opts = append(opts, stead.WithInstanceID(fmt.Sprintf("faultrun-direct-%d", w)))
	}
	var st *stead.Store
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		if st == nil {
			var err error
			if st, err = stead.Open(ctx, url, opts...); err != nil {
				c.failed.Add(1)
				time.Sleep(50 * time.Millisecond)
				continue
			}
		}
		size := 1 + rng.IntN(4<<10)
		if rng.IntN(8) == 0 {
			size = 300<<10 + rng.IntN(2<<20) // chunked
		}
		value := make([]byte, size)
		for i := range value {
			value[i] = byte(rng.Uint32())
		}
		opCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		key, err := st.Blobs.Put(opCtx, bytes.NewReader(value))
		if err == nil {
			name := fmt.Sprintf("faultrun/%d/%d", w, n)
			if _, err = st.Refs.Set(opCtx, name, key, ref.SetOptions{}); err == nil {
				out = append(out, acked{name: name, key: key})
				c.acked.Add(1)
			}
		}
		cancel()
		if err != nil {
			c.failed.Add(1)
		}
	}
	return out
}

// terminator terminates one of the run's backends (application_name
// faultrun, which the writers' and servers' URL sets) every
// -terminate-every.
func terminator(ctx context.Context, admin *pgxpool.Pool, schema string, c *counts) {
	t := time.NewTicker(*terminate)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ok bool
		err := admin.QueryRow(ctx, `SELECT coalesce(pg_terminate_backend(pid), false) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'faultrun' AND pid <> pg_backend_pid()
			ORDER BY random() LIMIT 1`).Scan(&ok)
		if err == nil && ok {
			c.terminated.Add(1)
		}
	}
}

// killer kills (SIGKILL) or stops (SIGSTOP for 2 s) one server every
// -kill-every, starting a killed one again.
func killer(ctx context.Context, servers []*server, c *counts) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(*killEvery):
		}
		s := servers[i%len(servers)]
		if i%3 == 2 {
			_ = s.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(2 * time.Second)
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			c.stops.Add(1)
			continue
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
		c.kills.Add(1)
		s.start()
	}
}

type server struct {
	bin, db, addr, log string
	cmd                *exec.Cmd
	exited             chan struct{} // closed when cmd exits
}

// start starts the server and waits until it answers, starting it again
// when it exits first (its Open may meet a terminated backend), as a
// supervisor would.
func (s *server) start() {
	for try := 0; try < 50; try++ {
		f, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		s.cmd = exec.Command(s.bin, "--db", s.db, "--log-level", "warn", "serve", "--addr", s.addr)
		s.cmd.Stdout, s.cmd.Stderr = f, f
		if err := s.cmd.Start(); err != nil {
			log.Fatal(err)
		}
		f.Close()
		exited := make(chan struct{})
		go func() { _, _ = s.cmd.Process.Wait(); close(exited) }()
		for range 200 {
			if resp, err := http.Get("http://" + s.addr + "/healthz"); err == nil {
				resp.Body.Close()
				s.exited = exited
				return
			}
			select {
			case <-exited:
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
		_ = s.cmd.Process.Kill()
		<-exited
	}
	log.Fatalf("stead serve on %s did not start; see %s", s.addr, s.log)
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
}

// check reads every acknowledged write back through a store of its own
// that verifies reads, and counts orphan chunk rows.
func check(ctx context.Context, writes []acked, admin *pgxpool.Pool, schema string) (lost, corrupt, orphans int) {
	st, err := stead.Open(ctx, *dbURL, stead.WithVerifyReads())
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	for _, w := range writes {
		r, err := st.Refs.Get(ctx, w.name)
		if err != nil || r.Key != w.key {
			lost++
			log.Printf("lost: ref %s: %v %v", w.name, r.Key, err)
			continue
		}
		rc, err := st.Blobs.Get(ctx, w.key)
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		switch {
		case errors.Is(err, stead.ErrDigestMismatch):
			corrupt++
			log.Printf("corrupt: %s", w.key)
		case err != nil:
			lost++
			log.Printf("lost: blob %s: %v", w.key, err)
		}
	}
	s := pgx.Identifier{schema}.Sanitize()
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+s+`.blob_chunks c
		WHERE NOT EXISTS (SELECT FROM `+s+`.blobs b WHERE b.chunks = c.chunks)
		AND NOT EXISTS (SELECT FROM `+s+`.blob_uploads u WHERE u.id = c.chunks)`).Scan(&orphans); err != nil {
		log.Fatal(err)
	}
	return lost, corrupt, orphans
}
