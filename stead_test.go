package stead_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gblob "gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	_ "modernc.org/sqlite"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/record"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestOpenURLs changes the working directory, so it does not run in
// parallel.
func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir) // relative sqlite paths land in the temp dir
	for _, sub := range []string{"data", "abs"} {
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// $STORE and $SERVER stand for a test database's store and server
	// URLs, made only in the subtests that use them.
	tests := []struct {
		name, url string
		err       error
		shared    bool
	}{
		{"memory", "mem://", nil, false},
		{"sqlite relative", "sqlite://./data/rel.db", nil, false},
		{"sqlite relative bare", "sqlite://data/bare.db", nil, false},
		{"sqlite absolute", "sqlite://" + filepath.Join(dir, "abs", "s.db"), nil, false},
		{"postgres", "$STORE", nil, true},
		{"postgresql scheme", "$STORE", nil, true},
		{"memory with path", "mem://x", stead.ErrInvalidArgument, false},
		{"unknown scheme", "mysql://u@h/db", stead.ErrInvalidArgument, false},
		{"no scheme", "./stead.db", stead.ErrInvalidArgument, false},
		{"empty", "", stead.ErrInvalidArgument, false},
		{"sqlite unknown param", "sqlite://./x.db?cache=shared", stead.ErrInvalidArgument, false},
		{"sqlite missing directory", "sqlite://./nonexistent/x.db", stead.ErrInvalidArgument, false},
		{"postgres unknown param", "$SERVER&search_path=x", stead.ErrInvalidArgument, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.url, "$") {
				db := pgtest.New(t)
				tt.url = strings.NewReplacer("$STORE", db.StoreURL(), "$SERVER", db.URL).Replace(tt.url)
				if tt.name == "postgresql scheme" {
					tt.url = strings.Replace(tt.url, "postgres://", "postgresql://", 1)
				}
			}
			st, err := stead.Open(ctx, tt.url)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Open(%q) = %v, want %v", tt.url, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q) = %v", tt.url, err)
			}
			defer st.Close()
			if shared, reason := st.Cluster(); shared != tt.shared || reason == "" {
				t.Fatalf("Cluster() = %v, %q; want shared=%v", shared, reason, tt.shared)
			}
			if _, err := st.Blobs.Put(ctx, strings.NewReader("x")); err != nil {
				t.Fatalf("Put: %v", err)
			}
		})
	}
	for _, p := range []string{"data/rel.db", "data/bare.db", "abs/s.db"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("database file %s: %v", p, err)
		}
	}
}

func TestInstanceID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := stead.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := stead.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.InstanceID() == "" || a.InstanceID() == b.InstanceID() {
		t.Fatalf("instance ids %q and %q: want distinct and non-empty", a.InstanceID(), b.InstanceID())
	}
	c, err := stead.Open(ctx, "mem://", stead.WithInstanceID("node-1"))
	if err != nil || c.InstanceID() != "node-1" {
		t.Fatalf("WithInstanceID: %v, %v", c, err)
	}
	c.Close()
	for _, bad := range []string{"", "a\nb", strings.Repeat("x", 256)} {
		if bad == "" {
			continue // the empty option means "random"
		}
		if _, err := stead.Open(ctx, "mem://", stead.WithInstanceID(bad)); !errors.Is(err, stead.ErrInvalidName) {
			t.Errorf("WithInstanceID(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	if _, err := stead.Open(ctx, "mem://", stead.WithMaxBlobSize(-1)); !errors.Is(err, stead.ErrInvalidArgument) {
		t.Errorf("WithMaxBlobSize(-1) = %v, want ErrInvalidArgument", err)
	}
	for _, grace := range []time.Duration{-time.Second, gc.MaxGrace + time.Second} {
		if _, err := stead.Open(ctx, "mem://", stead.WithGCGrace(grace)); !errors.Is(err, stead.ErrInvalidArgument) {
			t.Errorf("WithGCGrace(%v) = %v, want ErrInvalidArgument", grace, err)
		}
	}
}

// TestInstanceIDExclusive: an instance id given by WithInstanceID is held
// by one open store at a time on PostgreSQL (session lock or, behind
// PgBouncer, lease row) and SQLite (lock file): a second Open with it is
// refused with ErrLeased naming the id, other ids and random ids open
// beside it, and it opens again once its holder closes.
func TestInstanceIDExclusive(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "s.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.New(t).StoreURL() }},
		{"postgres via pgbouncer", func(t *testing.T) string {
			db := pgtest.New(t)
			st, err := stead.Open(t.Context(), db.StoreURL()) // migrated directly
			if err != nil {
				t.Fatal(err)
			}
			st.Close()
			return db.ViaPgBouncer(t).StoreURL() + "&pgbouncer=true"
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := tt.url(t)
			const id = `worker "1"; ü`
			open := func(opts ...stead.Option) (*stead.Store, error) {
				st, err := stead.Open(t.Context(), url, opts...)
				if err == nil {
					t.Cleanup(func() { st.Close() })
				}
				return st, err
			}
			first, err := open(stead.WithInstanceID(id))
			if err != nil {
				t.Fatal(err)
			}
			_, err = open(stead.WithInstanceID(id))
			if !errors.Is(err, stead.ErrLeased) || !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) || !strings.Contains(err.Error(), "WithInstanceID") {
				t.Fatalf("a second Open with the id = %v, want ErrLeased naming the id and WithInstanceID", err)
			}
			if _, err := open(stead.WithInstanceID("worker-2")); err != nil {
				t.Fatalf("Open with another id = %v", err)
			}
			for range 2 {
				if _, err := open(); err != nil {
					t.Fatalf("Open with a random id = %v", err)
				}
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			again, err := open(stead.WithInstanceID(id))
			if err != nil {
				t.Fatalf("Open with the id after its holder closed = %v", err)
			}
			if _, err := again.Blobs.Put(t.Context(), strings.NewReader("pinned by the id")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWithoutMigrate opens a never-migrated SQLite file: reads answer
// absent, writes name `stead migrate`, and Migrate fixes it.
func TestWithoutMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	st, err := stead.Open(ctx, url, stead.WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if current, latest, err := st.SchemaVersion(ctx); err != nil || current != 0 || latest < 1 {
		t.Fatalf("SchemaVersion = %d, %d, %v; want 0, >=1", current, latest, err)
	}
	if has, err := st.Blobs.Has(ctx, blob.KeyOf(nil)); err != nil || has {
		t.Fatalf("Has on a virgin store = %v, %v", has, err)
	}
	_, err = st.Blobs.Put(ctx, strings.NewReader("x"))
	if !errors.Is(err, stead.ErrSchema) || !strings.Contains(err.Error(), "stead migrate") {
		t.Fatalf("Put on a virgin store = %v, want ErrSchema naming stead migrate", err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Blobs.Put(ctx, strings.NewReader("x")); err != nil {
		t.Fatalf("Put after Migrate: %v", err)
	}
}

// TestNewerSchema refuses a database migrated by a newer binary, with or
// without WithoutMigrate.
func TestNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	st, err := stead.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	_, latest, _ := st.SchemaVersion(ctx)
	st.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO schema_version (version, name) VALUES (?, 'future')", latest+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, opts := range [][]stead.Option{nil, {stead.WithoutMigrate()}} {
		if _, err := stead.Open(ctx, "sqlite://"+path, opts...); !errors.Is(err, stead.ErrSchema) {
			t.Errorf("Open(%d options) on a newer database = %v, want ErrSchema", len(opts), err)
		}
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := stead.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := st.Blobs.Put(ctx, strings.NewReader("x")); !errors.Is(err, stead.ErrClosed) {
		t.Fatalf("Put after Close = %v, want ErrClosed", err)
	}
}

// TestWithClock checks that WithClock is the clock lock leases and records
// are measured and stamped by, on every engine.
func TestWithClock(t *testing.T) {
	t.Parallel()
	urls := map[string]string{
		"memory":   "mem://",
		"sqlite":   "sqlite://" + filepath.Join(t.TempDir(), "s.db"),
		"postgres": "", // made in its subtest, which alone skips without a server
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if name == "postgres" {
				url = pgtest.New(t).StoreURL()
			}
			ctx := t.Context()
			now := time.Date(2040, 1, 1, 0, 0, 0, 123456789, time.UTC)
			st, err := stead.Open(ctx, url, stead.WithClock(func() time.Time { return now }), stead.WithInstanceID("solo"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			lk, ok, err := st.Locks.TryLock(ctx, "job", "alice", time.Minute)
			if err != nil || !ok {
				t.Fatalf("TryLock = %v, %v", ok, err)
			}
			if want := now.UTC().Truncate(time.Microsecond).Add(time.Minute); !lk.Expiry().Equal(want) {
				t.Fatalf("lock Expiry = %v, want the injected clock's %v", lk.Expiry(), want)
			}
			group := st.InstanceID() // working alone
			if err := st.Records.RegisterGroup(ctx, group); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Records.Save(ctx, record.Record{ID: "r", Group: group, Status: record.Active}); err != nil {
				t.Fatal(err)
			}
			recs, err := st.Records.ClaimNext(ctx, group, "me", time.Minute, 1)
			if err != nil || len(recs) != 1 {
				t.Fatalf("ClaimNext = %v, %v", recs, err)
			}
			want := now.UTC().Truncate(time.Microsecond)
			if got := recs[0]; !got.UpdatedAt.Equal(want) || !got.Lease.Expiry.Equal(want.Add(time.Minute)) {
				t.Fatalf("claimed at %v until %v, want %v until %v", got.UpdatedAt, got.Lease.Expiry, want, want.Add(time.Minute))
			}
		})
	}
}

// TestOpenErrorHidesSecrets checks that no error from Open repeats a
// password or token in the URL it could not use.
func TestOpenErrorHidesSecrets(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"postgres://u:SECRETPW%ZZ@127.0.0.1/x",
		"postgres://u:SECRETPW@[::1/x",
		"postgres://u@127.0.0.1/x?password=SECRETPW%ZZ",
		"postgres://u@127.0.0.1/x?listen_url=postgres%3A%2F%2Fu%3ASECRETPW%25ZZ%40h%2Fx",
		"host=127.0.0.1 port=1 password=SECRETPW",
		"SECRETPW",
		"http://127.0.0.1:1?token=SECRETPW",
		"mem://SECRETPW",
		"sqlite://./x.db?password=SECRETPW",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := stead.Open(ctx, u)
		cancel()
		if err == nil {
			st.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "SECRETPW") {
			t.Errorf("Open(%q) = %v, repeats the secret", u, err)
		}
	}
}

// TestWithGC runs background sweeps: in a store that declares no
// liveness they are refused (each report says why) unless the store was
// opened with WithGCAllUnreferenced, and then they collect what nothing
// keeps.
func TestWithGC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprint("all unreferenced ", all), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var reports []error
			opts := []stead.Option{stead.WithPinTTL(time.Millisecond), stead.WithGCGrace(time.Millisecond),
				stead.WithGC(5*time.Millisecond, func(_ gc.Report, err error) {
					mu.Lock()
					defer mu.Unlock()
					reports = append(reports, err)
				})}
			if all {
				opts = append(opts, stead.WithGCAllUnreferenced())
			}
			st, err := stead.Open(ctx, "mem://", opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			key, err := st.Blobs.Put(ctx, strings.NewReader("background"))
			if err != nil {
				t.Fatal(err)
			}
			testkit.Until(t, "a few background sweeps", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(reports) >= 5
			})
			has, err := st.Blobs.Has(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			last := reports[len(reports)-1]
			mu.Unlock()
			if !all {
				if !has || !errors.Is(last, gc.ErrNoLiveness) {
					t.Fatalf("without WithGCAllUnreferenced: blob stored %v, last report %v; want kept and the sweep refused", has, last)
				}
				return
			}
			testkit.Until(t, "the background sweeps to collect the blob", func() bool {
				has, err := st.Blobs.Has(ctx, key)
				return err == nil && !has
			})
		})
	}
}

// TestOpenReapInterrupted: reaping lapsed uploads at open is best effort.
// A reap cut off by the caller's context (a SIGTERM just after start) or
// failing outright is logged, and the store opens.
func TestOpenReapInterrupted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		cancel bool
		err    error
	}{
		{"cancelled mid-reap", true, context.Canceled},
		{"unavailable", false, stead.ErrUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			eng := faultengine.New(memory.New(), faultengine.Func(func(op faultengine.Op) error {
				if op != faultengine.BlobReapUploads {
					return nil
				}
				if tt.cancel {
					cancel()
				}
				return tt.err
			}))
			logs := &recordingHandler{}
			st, err := stead.New(ctx, eng, stead.WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatalf("New with its reap failing (%v) = %v, want the store opened", tt.err, err)
			}
			t.Cleanup(func() { st.Close() })
			got := logs.find("reap")
			if got == nil || got.Level != slog.LevelWarn {
				t.Fatalf("logged %v, want a warning about the reap", logs.all())
			}
			var logged error
			got.Attrs(func(a slog.Attr) bool {
				if e, ok := a.Value.Any().(error); ok {
					logged = e
				}
				return true
			})
			if !errors.Is(logged, tt.err) {
				t.Fatalf("the warning's error = %v, want %v", logged, tt.err)
			}
			if _, err := st.Blobs.Put(t.Context(), strings.NewReader("after the reap")); err != nil {
				t.Fatalf("Put after the open = %v", err)
			}
		})
	}
}

// recordingHandler is a slog.Handler that keeps every record.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// find returns the first record whose message holds s, or nil.
func (h *recordingHandler) find(s string) *slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.records {
		if strings.Contains(h.records[i].Message, s) {
			return &h.records[i]
		}
	}
	return nil
}

func (h *recordingHandler) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		out = append(out, r.Level.String()+" "+r.Message)
	}
	return out
}

// TestGCLogsFailedSweeps: a background sweep that fails (here refused: the
// store declares no liveness) is logged, not only reported to a callback.
func TestGCLogsFailedSweeps(t *testing.T) {
	t.Parallel()
	logs := &recordingHandler{}
	st, err := stead.New(t.Context(), memory.New(), stead.WithGC(5*time.Millisecond, nil), stead.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testkit.Until(t, "a failed background sweep to be logged", func() bool {
		r := logs.find("GC sweep failed")
		return r != nil && r.Level == slog.LevelWarn
	})
}

// TestBytesBucket opens a SQLite store whose large values go to a bucket
// given by option: a value over the inline limit is one object there, read
// back whole, and gone from the bucket once collected.
func TestBytesBucket(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bucket := memblob.OpenBucket(nil)
	t.Cleanup(func() { bucket.Close() })
	st, err := stead.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "s.db"), stead.WithBytesBucket(bucket), stead.WithPinTTL(time.Millisecond), stead.WithGCGrace(time.Microsecond), stead.WithGCAllUnreferenced())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	value := bytes.Repeat([]byte("large value "), 100_000)
	key, err := st.Blobs.Put(ctx, bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	objects := func() []string {
		var names []string
		it := bucket.List(&gblob.ListOptions{Prefix: "o/"})
		for {
			o, err := it.Next(ctx)
			if err == io.EOF {
				return names
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, o.Key)
		}
	}
	if got := objects(); len(got) != 1 {
		t.Fatalf("bucket holds %q, want one object", got)
	}
	rd, err := st.Blobs.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Get = %d bytes, %v; want the %d put", len(got), err, len(value))
	}
	time.Sleep(2 * time.Millisecond) // the put's pin lapses
	for range 2 {                    // the first sweep stages, the second deletes
		if _, err := st.GC.Sweep(ctx, gc.SweepOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if ok, err := st.Blobs.Has(ctx, key); err != nil || ok {
		t.Fatalf("Has after two sweeps = %v, %v; want collected", ok, err)
	}
	if got := objects(); len(got) != 0 {
		t.Fatalf("bucket holds %q after the blob was collected, want nothing", got)
	}
	if _, err := stead.Open(ctx, "mem://", stead.WithBytesBucket(bucket)); !errors.Is(err, stead.ErrInvalidArgument) {
		t.Fatalf("Open(mem://) with a bucket = %v, want ErrInvalidArgument", err)
	}
}

// TestSweepStoredFailure: a sweep that deleted blobs and then fails only
// to read what the store holds reports its deletions, with no error and
// Stored nil.
func TestSweepStoredFailure(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Now())
	sw := &faultengine.Switch{}
	st, err := stead.New(ctx, faultengine.New(memory.New(), sw), stead.WithClock(clk.Now), stead.WithGCGrace(time.Second), stead.WithGCAllUnreferenced())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, s := range []string{"a", "b", "c"} {
		if _, err := st.Blobs.Put(ctx, strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Hour)
	if rep, err := st.GC.Sweep(ctx, gc.SweepOptions{}); err != nil || rep.Stored == nil {
		t.Fatalf("first sweep = %v, %v; want what is stored read", rep, err)
	}
	clk.Advance(time.Hour)
	sw.Fail(faultengine.GCStored)
	rep, err := st.GC.Sweep(ctx, gc.SweepOptions{})
	if err != nil || rep.Deleted != 3 || rep.Stored != nil {
		t.Fatalf("sweep with Stored failing = %v, %v; want 3 deleted, no error, Stored nil", rep, err)
	}
}
