package sqlite_test

import (
	"context"
	"path/filepath"
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
			e := openConfig(t, sqlite.Config{Path: tempPath(t), Bytes: "file://" + filepath.ToSlash(t.TempDir())})
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
	e := openEngine(t, tempPath(t))
	mustMigrate(t, e)
	return e
}

func mustMigrate(t *testing.T, e *sqlite.Engine) {
	t.Helper()
	if err := e.Migrate(context.WithoutCancel(t.Context())); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}
