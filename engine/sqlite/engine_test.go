package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/steaderr"
)

// rawDB opens path directly, bypassing the engine, closed when t ends.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustPut(t *testing.T, e *sqlite.Engine, value []byte) blob.Key {
	t.Helper()
	key := blob.KeyOf(value)
	if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
	return key
}

func wantVersion(t *testing.T, e *sqlite.Engine, wantCurrent int) (latest int) {
	t.Helper()
	current, latest, err := e.SchemaVersion(t.Context())
	if err != nil {
		t.Fatalf("SchemaVersion: %v", err)
	}
	if current != wantCurrent {
		t.Fatalf("SchemaVersion = %d, %d; want current %d", current, latest, wantCurrent)
	}
	return latest
}

func TestOpenCreatesFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stead.db")
	e := openEngine(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}
	mustMigrate(t, e)
	var mode string
	if err := rawDB(t, path).QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Fatalf("journal_mode = %q, want wal", mode)
	}
}

func TestOpenPathNeedingEscape(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a b%25#c?d", "s?.db")
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	e := openEngine(t, path)
	mustMigrate(t, e)
	mustPut(t, e, []byte("escaped"))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}
}

func TestOpenRelativePath(t *testing.T) {
	// t.Chdir forbids t.Parallel.
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("data", 0o755); err != nil {
		t.Fatal(err)
	}
	e := openEngine(t, "data/rel.db")
	// The path was resolved at Open: later connections must not follow a
	// change of working directory.
	t.Chdir(t.TempDir())
	mustMigrate(t, e)
	mustPut(t, e, []byte("relative"))
	if _, err := os.Stat(filepath.Join(dir, "data", "rel.db")); err != nil {
		t.Fatalf("database file: %v", err)
	}
}

func TestOpenNotADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a database "), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err == nil {
		e.Close()
		t.Fatal("Open of a non-database file succeeded")
	}
	var driverErr *msqlite.Error
	if !errors.As(err, &driverErr) {
		t.Fatalf("Open error %v does not hold the driver's *sqlite.Error", err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	values := [][]byte{{}, []byte("one"), bytes.Repeat([]byte("large "), 50_000)}
	for cycle := range 2 {
		e, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, Synchronous: "full"})
		if err != nil {
			t.Fatal(err)
		}
		mustMigrate(t, e)
		if cycle == 0 {
			for _, v := range values {
				mustPut(t, e, v)
			}
		}
		for _, v := range values {
			got, err := e.Blobs().Get(t.Context(), blob.KeyOf(v))
			if err != nil || !bytes.Equal(got.Value, v) {
				t.Fatalf("cycle %d: Get(%d bytes) = %d bytes, %v", cycle, len(v), len(got.Value), err)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	e := openEngine(t, path)
	latest := wantVersion(t, e, 0)
	if latest < 1 {
		t.Fatalf("latest = %d, want >= 1", latest)
	}
	mustMigrate(t, e)
	wantVersion(t, e, latest)
	key := mustPut(t, e, []byte("kept"))

	// Re-running is a no-op, from this engine and from another.
	mustMigrate(t, e)
	mustMigrate(t, openEngine(t, path))
	wantVersion(t, e, latest)
	var rows int
	if err := rawDB(t, path).QueryRow("SELECT count(*) FROM schema_version").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != latest {
		t.Fatalf("schema_version has %d rows, want %d", rows, latest)
	}
	if _, err := e.Blobs().Stat(t.Context(), key); err != nil {
		t.Fatalf("Stat after re-migrating: %v", err)
	}
}

func TestMigrateNewerSchema(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	e := openEngine(t, path)
	mustMigrate(t, e)
	_, latest, err := e.SchemaVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, path).Exec("INSERT INTO schema_version (version, name) VALUES (?, 'from_the_future')", latest+1); err != nil {
		t.Fatal(err)
	}
	err = e.Migrate(t.Context())
	if !errors.Is(err, steaderr.ErrSchema) {
		t.Fatalf("Migrate = %v, want an error wrapping ErrSchema", err)
	}
	if want := fmt.Sprintf("database schema version %d is newer than this binary (%d): upgrade stead", latest+1, latest); !strings.Contains(err.Error(), want) {
		t.Fatalf("Migrate = %q, want it to say %q", err, want)
	}
	if got := wantVersion(t, e, latest+1); got != latest {
		t.Fatalf("SchemaVersion latest = %d, want %d", got, latest)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	engines := []*sqlite.Engine{openEngine(t, path), openEngine(t, path), openEngine(t, path)}
	var wg sync.WaitGroup
	errs := make([]error, len(engines))
	for i, e := range engines {
		wg.Go(func() { errs[i] = e.Migrate(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("engine %d: Migrate: %v", i, err)
		}
	}
	_, latest, _ := engines[0].SchemaVersion(t.Context())
	for _, e := range engines {
		wantVersion(t, e, latest)
	}
	var rows int
	if err := rawDB(t, path).QueryRow("SELECT count(*) FROM schema_version").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != latest {
		t.Fatalf("schema_version has %d rows, want %d", rows, latest)
	}
}

func TestVirgin(t *testing.T) {
	t.Parallel()
	e := openEngine(t, tempPath(t))
	ctx := t.Context()
	b := e.Blobs()
	value := []byte("virgin")
	key := blob.KeyOf(value)

	wantVersion(t, e, 0)
	if _, err := b.Get(ctx, key); !errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrSchema) {
		t.Errorf("Get = %v, want ErrNotFound alone", err)
	}
	if _, err := b.Stat(ctx, key); !errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrSchema) {
		t.Errorf("Stat = %v, want ErrNotFound alone", err)
	}
	n := 0
	if err := b.List(ctx, blob.Key{}, 1000, func(blob.Info) bool { n++; return true }); err != nil || n != 0 {
		t.Errorf("List = %d blobs, %v; want none, nil", n, err)
	}
	for name, err := range map[string]error{
		"Put":    putErr(b.Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute})),
		"Delete": deleteErr(b.Delete(ctx, blob.DeleteParams{Keys: []blob.Key{key}})),
	} {
		if !errors.Is(err, steaderr.ErrSchema) || !strings.Contains(err.Error(), "schema not initialized: run stead migrate") {
			t.Errorf("%s = %v, want ErrSchema saying to run stead migrate", name, err)
		}
		var driverErr *msqlite.Error
		if !errors.As(err, &driverErr) {
			t.Errorf("%s = %v: the driver's *sqlite.Error is not in the chain", name, err)
		}
	}
	// Migrating later makes the same engine usable.
	mustMigrate(t, e)
	mustPut(t, e, value)
	if got, err := b.Get(ctx, key); err != nil || !bytes.Equal(got.Value, value) {
		t.Fatalf("Get after Migrate = %q, %v", got.Value, err)
	}
}

// deleteErr is a one-key Delete's outcome as an error.
func putErr(_ bool, err error) error { return err }

func deleteErr(vs []blob.Verdict, err error) error {
	if err != nil {
		return err
	}
	return vs[0].Err()
}

// calls exercises every method of e, returning each one's error by name.
func calls(ctx context.Context, e *sqlite.Engine) map[string]error {
	b := e.Blobs()
	key := blob.KeyOf([]byte("call"))
	_, _, versionErr := e.SchemaVersion(ctx)
	_, getErr := b.Get(ctx, key)
	_, statErr := b.Stat(ctx, key)
	return map[string]error{
		"Migrate":       e.Migrate(ctx),
		"SchemaVersion": versionErr,
		"Put":           putErr(b.Put(ctx, blob.PutParams{Key: key, Value: []byte("call"), Owner: "test", TTL: time.Minute})),
		"Get":           getErr,
		"Stat":          statErr,
		"List":          b.List(ctx, blob.Key{}, 1000, func(blob.Info) bool { return true }),
		"Delete":        deleteErr(b.Delete(ctx, blob.DeleteParams{Keys: []blob.Key{key}})),
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	mustPut(t, e, []byte("call")) // so that Delete and Get would succeed
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, err := range calls(t.Context(), e) {
		if !errors.Is(err, steaderr.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if shared, reason := e.Cluster(); shared || reason != "single-node file" {
		t.Errorf("Cluster = %v, %q", shared, reason)
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	e := openEngine(t, path)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for name, err := range calls(ctx, e) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
		}
	}
	// Nothing changed: still a virgin file.
	wantVersion(t, e, 0)
	mustMigrate(t, e)
	if _, err := e.Blobs().Stat(t.Context(), blob.KeyOf([]byte("call"))); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("Stat of the cancelled put = %v, want ErrNotFound", err)
	}
}

func TestPutNeverOverwrites(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	key := blob.KeyOf([]byte("first"))
	if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: key, Value: []byte("first"), Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// The engine trusts its caller's key; a second put under it must still
	// be a no-op, not a replacement.
	if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: key, Value: []byte("second, longer"), Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	got, err := e.Blobs().Get(t.Context(), key)
	if err != nil || string(got.Value) != "first" {
		t.Fatalf("Get = %q, %v; want the first value", got.Value, err)
	}
	info, err := e.Blobs().Stat(t.Context(), key)
	if err != nil || info.Size != int64(len("first")) || info.Key != key {
		t.Fatalf("Stat = %+v, %v", info, err)
	}
}

func TestNilValue(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	key := blob.KeyOf(nil)
	if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: key, Value: nil, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	got, err := e.Blobs().Get(t.Context(), key)
	if err != nil || got.Value == nil || len(got.Value) != 0 {
		t.Fatalf("Get = %#v, %v; want an empty non-nil slice", got.Value, err)
	}
}

// One page of List is one statement, so one snapshot.
func TestListPageIsOneSnapshot(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for i := range 50 {
		mustPut(t, e, fmt.Appendf(nil, "before %d", i))
	}
	var seen []blob.Key
	err := e.Blobs().List(t.Context(), blob.Key{}, 100, func(info blob.Info) bool {
		// Writes committed while the list runs are not part of it, whatever
		// their keys; reads from inside yield use another reader.
		if len(seen) < 20 {
			mustPut(t, e, fmt.Appendf(nil, "during %d", len(seen)))
			if _, err := e.Blobs().Get(t.Context(), info.Key); err != nil {
				t.Errorf("Get inside yield: %v", err)
			}
		}
		if len(seen) == 10 {
			if err := deleteErr(e.Blobs().Delete(t.Context(), blob.DeleteParams{Keys: []blob.Key{info.Key}, Now: time.Now().Add(time.Hour)})); err != nil {
				t.Errorf("Delete inside yield: %v", err)
			}
		}
		seen = append(seen, info.Key)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 50 {
		t.Fatalf("List saw %d blobs, want the 50 stored when it began", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i-1].Compare(seen[i]) >= 0 {
			t.Fatalf("List out of order at %d: %s, %s", i, seen[i-1], seen[i])
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				// Every worker also re-puts the shared values: dedup under
				// contention.
				for _, v := range [][]byte{fmt.Appendf(nil, "w%d-%d", w, i), fmt.Appendf(nil, "shared-%d", i)} {
					if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: blob.KeyOf(v), Value: v, Owner: "test", TTL: time.Minute}); err != nil {
						t.Errorf("Put: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	n := 0
	if err := e.Blobs().List(t.Context(), blob.Key{}, 1000, func(blob.Info) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if want := workers*each + each; n != want {
		t.Fatalf("List = %d blobs, want %d", n, want)
	}
}

func TestCancelWhileWaitingForLock(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	e := openEngine(t, path)
	mustMigrate(t, e)
	release := sqlite.HoldWriteLock(t, path)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	value := []byte("blocked")
	if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: blob.KeyOf(value), Value: value, Owner: "test", TTL: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put while another holds the write lock = %v, want context.DeadlineExceeded", err)
	}
	release()
	if _, err := e.Blobs().Stat(t.Context(), blob.KeyOf(value)); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("Stat of the cancelled put = %v, want ErrNotFound", err)
	}
	// The writer connection is usable again.
	mustPut(t, e, value)
}

func TestBusyTimeout(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	e := openConfig(t, sqlite.Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	mustMigrate(t, e)
	sqlite.HoldWriteLock(t, path)
	value := []byte("busy")
	_, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: blob.KeyOf(value), Value: value, Owner: "test", TTL: time.Minute})
	var driverErr *msqlite.Error
	if !errors.As(err, &driverErr) || driverErr.Code()&0xff != 5 { // SQLITE_BUSY
		t.Fatalf("Put while another holds the write lock past the busy timeout = %v, want SQLITE_BUSY", err)
	}
	if !errors.Is(err, steaderr.ErrUnavailable) {
		t.Fatalf("Put while another holds the write lock past the busy timeout = %v, want ErrUnavailable", err)
	}
}

// With one reader connection the body of an All loop can still read: All
// holds no reader while the body runs.
func TestAllWithOneReader(t *testing.T) {
	t.Parallel()
	e := openConfig(t, sqlite.Config{Path: tempPath(t), ReadConns: 1})
	mustMigrate(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := blob.NewStore(e.Blobs(), blob.Options{PageSize: 4})
	for i := range 10 {
		mustPut(t, e, fmt.Appendf(nil, "one reader %d", i))
	}
	n := 0
	for info, err := range s.All(ctx, blob.Key{}) {
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, info.Key); err != nil {
			t.Fatalf("Stat inside All: %v", err)
		}
		n++
	}
	if n != 10 {
		t.Fatalf("All yielded %d blobs, want 10", n)
	}
}
