package postgres_test

import (
	"io/fs"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/crashtest"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

func TestBytesTierCrash(t *testing.T) {
	t.Parallel()
	crashtest.Run(t, func(t *testing.T) crashtest.Harness {
		db, dir := pgtest.New(t), t.TempDir()
		params := "&bytes=" + url.QueryEscape("file://"+filepath.ToSlash(dir))
		return crashtest.Harness{
			Open:  func(t *testing.T) engine.Engine { return open(t, db, params) },
			Crash: func(eng engine.Engine, on bool) { postgres.SetDropCrash(eng.(*postgres.Engine), on) },
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
