package sqlite

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/internal/testing/crashtest"
)

func TestBytesTierCrash(t *testing.T) {
	t.Parallel()
	crashtest.Run(t, func(t *testing.T) crashtest.Harness {
		path, dir := filepath.Join(t.TempDir(), "s.db"), t.TempDir()
		return crashtest.Harness{
			Open: func(t *testing.T) engine.Engine {
				e, err := Open(t.Context(), Config{Path: path, Bytes: "file://" + filepath.ToSlash(dir)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				if err := e.Migrate(context.WithoutCancel(t.Context())); err != nil {
					t.Fatal(err)
				}
				return e
			},
			Crash: func(eng engine.Engine, on bool) { eng.(*Engine).dropCrash.Store(&on) },
			Objects: func(t *testing.T) []string {
				var names []string
				filepath.WalkDir(filepath.Join(dir, "o"), func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						names = append(names, p)
					}
					return nil
				})
				return names
			},
		}
	})
}
