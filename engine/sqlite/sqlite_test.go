package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/sqlite"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, enginetest.Harness{
		New:    func(t *testing.T) engine.Engine { return newEngine(t) },
		Virgin: func(t *testing.T) engine.Engine { return openEngine(t, tempPath(t)) },
		OneConn: func(t *testing.T) engine.Engine {
			e := openConfig(t, sqlite.Config{Path: migratedPath(t), ReadConns: 1})
			mustMigrate(t, e)
			return e
		},
	})
}

// TestConformanceBytesTier runs the tier's areas of the suite with the
// bytes tier on a file:// bucket: every value over the inline limit (in
// the chunked runs, over a few bytes) is an object.
func TestConformanceBytesTier(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, enginetest.Harness{
		Areas: enginetest.TierAreas,
		New: func(t *testing.T) engine.Engine {
			e := openConfig(t, sqlite.Config{Path: migratedPath(t), Bytes: "file://" + filepath.ToSlash(t.TempDir())})
			mustMigrate(t, e)
			return e
		},
		OneConn: func(t *testing.T) engine.Engine {
			e := openConfig(t, sqlite.Config{Path: migratedPath(t), Bytes: "file://" + filepath.ToSlash(t.TempDir()), ReadConns: 1})
			mustMigrate(t, e)
			return e
		},
	})
}

// tempPath returns a database path in a fresh temporary directory.
func tempPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "stead.db")
}

// openEngine opens the database at path without migrating it; it is
// closed when t ends.
func openEngine(t *testing.T, path string) *sqlite.Engine {
	t.Helper()
	return openConfig(t, sqlite.Config{Path: path})
}

func openConfig(t *testing.T, cfg sqlite.Config) *sqlite.Engine {
	t.Helper()
	e, err := sqlite.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// newEngine returns a migrated engine on a fresh database, closed when t
// ends.
func newEngine(t *testing.T) *sqlite.Engine {
	t.Helper()
	e := openEngine(t, migratedPath(t))
	mustMigrate(t, e)
	return e
}

// migratedPath returns a database path in a fresh temporary directory
// holding a copy of a database Migrate made current and nothing else:
// running every migration costs far more than a test's own statements (it
// was half of this package's CPU), so it runs once per test binary.
// Migrate on the copy takes its fast path (already current) and attaches
// a bytes tier if the engine has one. Tests of migration itself start
// from tempPath.
func migratedPath(t *testing.T) string {
	t.Helper()
	b, err := migratedTemplate()
	if err != nil {
		t.Fatal(err)
	}
	path := tempPath(t)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// migratedTemplate is the bytes of a freshly migrated database, closed
// (so its WAL is checkpointed into the file and removed).
var migratedTemplate = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "stead-sqlite-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "stead.db")
	ctx := context.Background()
	e, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		return nil, err
	}
	if err := e.Migrate(ctx); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.Close(); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
})

func mustMigrate(t *testing.T, e *sqlite.Engine) {
	t.Helper()
	if err := e.Migrate(context.WithoutCancel(t.Context())); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}
