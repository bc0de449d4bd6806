package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or, if write, rewrites it under
// -update.
func golden(t *testing.T, name, got string, write bool) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if write {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// The seeded store's clock and pin owner, so that its pins' expiries and
// its records' times print the same on every run.
var (
	seedClock = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	seedOwner = "seeder"
	// lapsedClock: an instant long past, for leases lapsed on any run.
	lapsedClock = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
)

// seeded values and records, for the golden cases.
var (
	alpha, beta, gamma = blob.KeyOf([]byte("alpha")).String(), blob.KeyOf([]byte("beta")).String(), blob.KeyOf([]byte("gamma")).String()
	absentKey          = "sha256:" + strings.Repeat("0", 64)
)

// seed fills the store at db with the blobs alpha, beta and gamma (pinned
// until 2030 by seedOwner) and records job-1…job-3 in group workers (and an
// empty group idle), on seedClock.
func seed(t *testing.T, db string) {
	t.Helper()
	st, err := stead.Open(context.Background(), db, stead.WithClock(func() time.Time { return seedClock }), stead.WithInstanceID(seedOwner))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, v := range []string{"alpha", "beta", "gamma"} {
		if _, err := st.Blobs.Put(ctx, strings.NewReader(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"workers", "idle"} {
		if err := st.Records.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []record.Record{
		{ID: "job-1", Group: "workers", Status: record.Active, Payload: []byte("first")},
		{ID: "job-2", Group: "workers", Tenant: "acme", Status: record.Active},
		{ID: "job-3", Group: "workers", Status: record.Completed},
	} {
		if _, err := st.Records.Save(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

// seedRefs points tags/v1 at alpha and tags/v2 at beta, annotated, and
// the weak ref links/v1 at alpha.
func seedRefs(t *testing.T, db string) {
	t.Helper()
	st := openStore(t, db)
	for _, r := range [][2]string{{"tags/v1", alpha}, {"tags/v2", beta}} {
		name, key := r[0], r[1]
		k, err := blob.ParseKey(key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Refs.Set(t.Context(), name, k, ref.SetOptions{Annotation: []byte("release " + name[len("tags/"):])}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := blob.ParseKey(alpha)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Refs.Set(t.Context(), "links/v1", k, ref.SetOptions{Weak: true}); err != nil {
		t.Fatal(err)
	}
}

// expiredRef sets cache/old to alpha, expiring a minute past lapsedClock.
func expiredRef(t *testing.T, db string) {
	t.Helper()
	st, err := stead.Open(t.Context(), db, stead.WithClock(func() time.Time { return lapsedClock }))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := blob.ParseKey(alpha)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Refs.Set(t.Context(), "cache/old", k, ref.SetOptions{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

// goneWeakRef puts the blob "gone" with a pin lapsed long ago, names it
// by the weak ref links/gone, and deletes the blob.
func goneWeakRef(t *testing.T, db string) {
	t.Helper()
	old, err := stead.Open(t.Context(), db, stead.WithClock(func() time.Time { return lapsedClock }))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	res, err := old.Blobs.PutWith(t.Context(), strings.NewReader("gone"), blob.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Refs.Set(t.Context(), "links/gone", res.Key, ref.SetOptions{Weak: true}); err != nil {
		t.Fatal(err)
	}
	if err := openStore(t, db).Blobs.Delete(t.Context(), res.Key); err != nil {
		t.Fatal(err)
	}
}

// serve starts a stead server over the store at db and returns its URL.
func serve(t *testing.T, db string) string {
	t.Helper()
	st, err := stead.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A mask replaces what varies from run to run in a golden case's output.
type mask struct {
	re   *regexp.Regexp
	with string
}

var (
	// maskTimes: instants taken from the real clock (not seedClock's).
	maskTimes = mask{regexp.MustCompile(`\b20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z`), "TIME"}
	// maskSweep: a sweep's duration.
	maskSweep = mask{regexp.MustCompile(`; in [0-9.]+[a-zµ]+`), "; in DURATION"}
	// maskSchema: the newest schema version, which grows with migrations.
	maskSchema = mask{regexp.MustCompile(`\b(version [0-9]+ (of|to)|version|to) [1-9][0-9]*\b`), "$1 LATEST"}
	// maskServer: a PostgreSQL server's version and its pool's open
	// connections.
	maskServer = mask{regexp.MustCompile(`(PostgreSQL|at most,) [0-9][0-9.]*( \(.*\))?`), "$1 N"}
	// maskBench: a bench's measures, but not its error counts.
	maskBench = []mask{
		{regexp.MustCompile(`(?m)^ *scenario .*$`), "scenario ops ops/s p50 p99 errors"},
		{regexp.MustCompile(`(?m)^ *(blob put|blob get|lock acquire\+release|record save \(CAS\)|record claim) .* ([0-9]+)$`), "$1: OPS, errors $2"},
		{regexp.MustCompile(`and [0-9]+ blobs`), "and N blobs"},
	}
)

// goldenCase is one command line whose output is kept in
// testdata/golden/NAME.txt. It runs against a seeded SQLite store and,
// unless local, a stead server over another: the output must be the same,
// unless remoteOwn.
type goldenCase struct {
	name  string
	args  []string // after --db URL; "DIR" is replaced by a fresh directory
	stdin string
	// fresh runs the command on an empty store instead of a seeded one.
	fresh bool
	// local runs the command on the SQLite store only.
	local bool
	// remoteOwn keeps the remote run's output in NAME.remote.txt: it
	// differs (the remote engine's error messages name the server).
	remoteOwn bool
	// postgres runs the command on a PostgreSQL schema too, its output
	// kept in NAME.postgres.txt.
	postgres bool
	// setup, if set, prepares the SQLite store at db (the one behind the
	// server, too) before the command.
	setup func(t *testing.T, db string)
	masks []mask
}

// futureClock: an instant far ahead, for leases held on any run.
var futureClock = time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC)

// leaseJob1 leases the seeded workers' job-1 to w1 until a minute past
// futureClock.
func leaseJob1(t *testing.T, db string) {
	t.Helper()
	st, err := stead.Open(t.Context(), db, stead.WithClock(func() time.Time { return futureClock }))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Records.Claim(t.Context(), "workers", "job-1", "w1", time.Minute); err != nil {
		t.Fatal(err)
	}
}

// seedLocks grants jobs/a and jobs/b until a minute past futureClock,
// and grants and releases jobs/c.
func seedLocks(t *testing.T, db string) {
	t.Helper()
	st, err := stead.Open(t.Context(), db, stead.WithClock(func() time.Time { return futureClock }))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, name := range []string{"jobs/a", "jobs/b", "jobs/c"} {
		lk, ok, err := st.Locks.TryLock(t.Context(), name, "node-7", time.Minute)
		if err != nil || !ok {
			t.Fatalf("TryLock(%q) = %v, %v", name, ok, err)
		}
		if name == "jobs/c" {
			if _, err := lk.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{name: "usage", args: nil, local: true},
		{name: "unknown-command", args: []string{"nope"}, local: true},
		{name: "serve-open-bind", args: []string{"serve", "--addr", "0.0.0.0:0"}, local: true},

		{name: "migrate-status-new", args: []string{"migrate", "status"}, fresh: true, local: true, postgres: true, masks: []mask{maskSchema}},
		{name: "migrate-new", args: []string{"migrate"}, fresh: true, local: true, postgres: true, masks: []mask{maskSchema}},
		{name: "migrate-current", args: []string{"migrate", "up"}, local: true, postgres: true, masks: []mask{maskSchema}},
		{name: "doctor", args: []string{"doctor"}, local: true, postgres: true, masks: []mask{maskSchema, maskServer}},
		{name: "doctor-new", args: []string{"doctor"}, fresh: true, local: true, postgres: true, masks: []mask{maskSchema, maskServer}},

		{name: "put", args: []string{"put", "DIR/hello"}},
		{name: "put-json", args: []string{"put", "--json", "DIR/hello"}},
		{name: "put-stdin", args: []string{"put", "-"}, stdin: "from stdin"},
		{name: "put-missing-file", args: []string{"put", "DIR/nope"}},
		{name: "get", args: []string{"get", alpha}},
		{name: "get-output", args: []string{"get", beta, "-o", "DIR/out"}},
		{name: "get-absent", remoteOwn: true, args: []string{"get", absentKey}},
		{name: "get-invalid-key", args: []string{"get", "sha256:nope"}},
		{name: "stat", args: []string{"stat", gamma}},
		{name: "stat-json", args: []string{"stat", "--json", gamma}},
		{name: "stat-absent", remoteOwn: true, args: []string{"stat", absentKey}},
		{name: "ls", args: []string{"ls"}},
		{name: "ls-json-limit", args: []string{"ls", "--json", "--limit", "2"}},
		{name: "ls-after", args: []string{"ls", "--after", alpha}},
		{name: "rm-pinned", args: []string{"rm", alpha}},
		{name: "rm-absent", args: []string{"rm", absentKey}},

		{name: "records-ls", args: []string{"records", "ls", "workers"}},
		{name: "records-ls-json", args: []string{"records", "ls", "--json", "workers"}},
		{name: "records-ls-empty-group", args: []string{"records", "ls", "idle"}},
		{name: "records-ls-unknown-group", args: []string{"records", "ls", "nogroup"}},
		{name: "records-ls-lapsed", args: []string{"records", "ls", "workers"}, setup: func(t *testing.T, db string) {
			st, err := stead.Open(t.Context(), db, stead.WithClock(func() time.Time { return lapsedClock }))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Records.Claim(t.Context(), "workers", "job-1", "w1", time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "records-show", args: []string{"records", "show", "job-1"}},
		{name: "records-show-json", args: []string{"records", "show", "--json", "job-2"}},
		{name: "records-leased", args: []string{"records", "leased", "workers"}, setup: leaseJob1},
		{name: "records-leased-json", args: []string{"records", "leased", "--json", "--limit", "1", "workers"}, setup: leaseJob1},
		{name: "records-leased-after", args: []string{"records", "leased", "--after", "job-1", "workers"}, setup: leaseJob1},
		{name: "records-leased-unknown-group", args: []string{"records", "leased", "nogroup"}},
		{name: "records-show-payload", args: []string{"records", "show", "--payload", "job-1"}},
		{name: "records-show-absent", remoteOwn: true, args: []string{"records", "show", "nobody"}},
		{name: "records-claim", args: []string{"records", "claim", "job-2", "--group", "workers", "--owner", "operator"}, masks: []mask{maskTimes}},
		{name: "records-claim-no-group", args: []string{"records", "claim", "job-2"}},

		{name: "lock", args: []string{"lock", "--try", "job", "--", "echo", "under the lock"}, local: true},
		{name: "lock-held", args: []string{"lock", "--try", "held", "--", "echo", "never"}, local: true, setup: func(t *testing.T, db string) {
			st := openStore(t, db)
			if _, ok, err := st.Locks.TryLock(t.Context(), "held", "someone", time.Hour); !ok || err != nil {
				t.Fatalf("TryLock = %v, %v", ok, err)
			}
		}},
		{name: "lock-no-command", args: []string{"lock", "job"}, local: true},
		{name: "locks", args: []string{"locks", "jobs/"}, setup: seedLocks},
		{name: "locks-json", args: []string{"locks", "--json", "--limit", "1", "jobs/"}, setup: seedLocks},
		{name: "locks-after", args: []string{"locks", "--after", "jobs/a", "jobs/"}, setup: seedLocks},
		{name: "locks-bad-limit", args: []string{"locks", "--limit", "0"}},

		{name: "put-ref", args: []string{"put", "--ref", "tags/hello", "DIR/hello"}},
		{name: "put-bad-child", args: []string{"put", "--child", "nope", "DIR/hello"}},
		{name: "put-ref-taken", remoteOwn: true, args: []string{"put", "--ref", "tags/v1", "--if-absent", "DIR/hello"}, setup: seedRefs},
		{name: "put-if-absent-no-ref", args: []string{"put", "--if-absent", "DIR/hello"}},
		{name: "get-ref", args: []string{"get", "--ref", "tags/v2"}, setup: seedRefs},
		{name: "get-ref-output", args: []string{"get", "--ref", "tags/v1", "-o", "DIR/out"}, setup: seedRefs},
		{name: "get-ref-and-key", args: []string{"get", "--ref", "tags/v1", alpha}},
		{name: "get-ref-bad-name", args: []string{"get", "--ref", "tags//v1"}},
		{name: "get-ref-empty", args: []string{"get", "--ref", ""}},
		{name: "get-ref-absent", remoteOwn: true, args: []string{"get", "--ref", "tags/none"}},
		{name: "get-ref-expired", remoteOwn: true, args: []string{"get", "--ref", "cache/old"}, setup: expiredRef},
		{name: "get-ref-blob-gone", remoteOwn: true, args: []string{"get", "--ref", "links/gone"}, setup: goneWeakRef},
		{name: "get-ref-touch", args: []string{"get", "--ref", "tags/v2", "--touch", "1h"}, setup: seedRefs},
		{name: "get-ref-touch-expired", remoteOwn: true, args: []string{"get", "--ref", "cache/old", "--touch", "1h"}, setup: expiredRef},
		{name: "get-ref-touch-negative", args: []string{"get", "--ref", "tags/v1", "--touch", "-1h"}, setup: seedRefs},
		{name: "get-touch-no-ref", args: []string{"get", "--touch", "1h", alpha}},
		{name: "ref-set", args: []string{"ref", "set", "tags/new", gamma}},
		{name: "ref-set-weak", args: []string{"ref", "set", "--weak", "links/new", gamma}},
		{name: "ref-set-taken", remoteOwn: true, args: []string{"ref", "set", "--if-absent", "tags/v1", gamma}, setup: seedRefs},
		{name: "ref-set-absent-key", remoteOwn: true, args: []string{"ref", "set", "tags/new", absentKey}},
		{name: "ref-get", args: []string{"ref", "get", "tags/v2"}, setup: seedRefs},
		{name: "ref-get-absent", remoteOwn: true, args: []string{"ref", "get", "tags/none"}},
		{name: "ref-ls", args: []string{"ref", "ls"}, setup: seedRefs},
		{name: "ref-ls-prefix-json", args: []string{"ref", "ls", "--json", "tags/v1"}, setup: seedRefs},
		{name: "ref-rm", args: []string{"ref", "rm", "tags/v1"}, setup: seedRefs},
		{name: "gc-explain-ref", args: []string{"gc", "explain", alpha}, setup: seedRefs},

		{name: "gc-dry-run", args: []string{"gc", "--dry-run"}, masks: []mask{maskSweep}},
		{name: "gc", args: []string{"gc", "--grace", "1m", "--all-unreferenced"}, setup: func(t *testing.T, db string) { collectable(t, db, "old", "new") }, masks: []mask{maskSweep}},
		{name: "gc-no-liveness", args: []string{"gc"}, setup: func(t *testing.T, db string) { collectable(t, db, "old", "new") }, masks: []mask{maskSweep}},
		{name: "gc-explain", args: []string{"gc", "explain", alpha}},
		{name: "gc-explain-absent", args: []string{"gc", "explain", absentKey}},
		{name: "pins", args: []string{"pins"}},

		{name: "scrub", args: []string{"scrub"}},
		{name: "scrub-from", args: []string{"scrub", "--from", beta}},
		{name: "scrub-bad-from", args: []string{"scrub", "--from", "beta"}},

		{name: "bench", args: []string{"bench", "--duration", "20ms", "--concurrency", "1"}, local: true, masks: maskBench},
		{name: "bench-bad-flags", args: []string{"bench", "--concurrency", "0"}, local: true},
	}
}

// TestGolden runs every command as a person would and compares what it
// prints, stdout, stderr and exit code, with testdata/golden.
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			engines := []string{"sqlite", "remote"}
			if tc.local {
				engines = engines[:1]
			}
			if tc.postgres {
				engines = append(engines, "postgres")
			}
			for _, engine := range engines {
				t.Run(engine, func(t *testing.T) {
					if strings.HasPrefix(tc.name, "lock") && runtime.GOOS == "windows" {
						t.Skip("runs echo")
					}
					t.Parallel()
					db, schema := storeURL(t), "\x00"
					if engine == "postgres" {
						pg := pgtest.New(t)
						db, schema = pg.StoreURL(), pg.Schema
					}
					if !tc.fresh {
						seed(t, db)
					}
					if tc.setup != nil {
						tc.setup(t, db)
					}
					url := db
					if engine == "remote" {
						url = serve(t, db)
					}
					dir := t.TempDir()
					if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("hello, stead"), 0o644); err != nil {
						t.Fatal(err)
					}
					args := []string{"--db", url}
					for _, a := range tc.args {
						args = append(args, strings.ReplaceAll(a, "DIR", dir))
					}
					var stdout, stderr bytes.Buffer
					code := execute(context.Background(), args, &env{stdin: strings.NewReader(tc.stdin), stdout: &stdout, stderr: &stderr})
					out := fmt.Sprintf("$ %s\n--- exit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(append([]string{"stead --db DB"}, tc.args...), " "), code, lines(stdout.String()), lines(stderr.String()))
					out = strings.NewReplacer(url, "DB", redacted(url), "DB", dir, "DIR", schema, "SCHEMA").Replace(out)
					for _, m := range tc.masks {
						out = m.re.ReplaceAllString(out, m.with)
					}
					name, own := tc.name, engine == "sqlite"
					if engine == "postgres" || engine == "remote" && tc.remoteOwn {
						name, own = name+"."+engine, true
					}
					golden(t, filepath.Join("golden", name+".txt"), out, own)
				})
			}
		})
	}
}

// lines returns out, marking a last line that does not end in a newline.
func lines(out string) string {
	if out != "" && !strings.HasSuffix(out, "\n") {
		return out + "\n[no newline at the end]\n"
	}
	return out
}

// TestHelpGolden keeps every command's --help in testdata/golden/help.txt:
// a change to a command, a flag or a default shows in its diff.
func TestHelpGolden(t *testing.T) {
	t.Parallel()
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	walk(newRoot(&env{stdout: io.Discard, stderr: io.Discard}), nil)
	var out strings.Builder
	for _, path := range paths {
		var stdout, stderr bytes.Buffer
		code := execute(context.Background(), append(path, "--help"), &env{stdout: &stdout, stderr: &stderr})
		fmt.Fprintf(&out, "$ %s --help\n--- exit %d\n%s%s\n", strings.Join(append([]string{"stead"}, path...), " "), code, stdout.String(), stderr.String())
	}
	golden(t, filepath.Join("golden", "help.txt"), out.String(), true)
}
