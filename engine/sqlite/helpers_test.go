package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// setup returns a migrated engine and its file's path.
func setup(t *testing.T) (*Engine, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	e, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e, path
}

// HoldWriteLock takes path's write lock from another connection until the
// returned function is called, or the end of t. Exported for the external
// tests.
func HoldWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.WithoutCancel(t.Context()), "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func stored(t *testing.T, e *Engine, value string) bool {
	t.Helper()
	_, err := e.blobs.Stat(t.Context(), blob.KeyOf([]byte(value)))
	if err != nil && !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// Puts racing Close either finish or fail with ErrClosed; none hangs.
func TestPutRacingClose(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	var wg sync.WaitGroup
	running := make(chan struct{})
	var once sync.Once
	for i := range 16 {
		wg.Go(func() {
			defer once.Do(func() { close(running) }) // also if it failed early
			for j := 0; ; j++ {
				if i == 0 && j == 10 {
					once.Do(func() { close(running) })
				}
				v := fmt.Appendf(nil, "%d-%d", i, j)
				if _, err := e.blobs.Put(t.Context(), blob.PutParams{Key: blob.KeyOf(v), Value: v, Owner: "test", TTL: time.Minute}); err != nil {
					if !errors.Is(err, steaderr.ErrClosed) {
						t.Errorf("Put: %v", err)
					}
					return
				}
			}
		})
	}
	<-running
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// MigrateTo applies e's pending migrations up to version only, for tests
// that seed a store as an older release left it. Exported for the external
// tests.
func MigrateTo(t *testing.T, e *Engine, version int) {
	t.Helper()
	for {
		current, _, err := e.SchemaVersion(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if current >= version {
			return
		}
		if _, err := e.migrateOne(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
