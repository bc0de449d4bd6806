package remote_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/internal/pgtest"
	"github.com/steadkit/stead/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// serve starts a server over the store at url (migrated unless virgin)
// and returns a remote engine on it. The server allows client clocks,
// as the suite moves time through the engine seam.
func serve(t *testing.T, url string, virgin bool) engine.Engine {
	t.Helper()
	var opts []stead.Option
	if virgin {
		opts = append(opts, stead.WithoutMigrate())
	}
	st, err := stead.Open(context.Background(), url, opts...)
	if err != nil {
		t.Fatalf("stead.Open(%s): %v", url, err)
	}
	srv := httptest.NewServer(server.New(st, server.Options{
		ClientClock: true,
		Token:       "conformance",
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	eng, err := remote.Open(context.Background(), remote.Config{URL: srv.URL, Token: "conformance"})
	if err != nil {
		t.Fatalf("remote.Open: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// TestConformance runs the engine suite over HTTP against a server over
// each local engine.
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, enginetest.Harness{
			New: func(t *testing.T) engine.Engine { return serve(t, "mem://", false) },
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "s.db") }
		enginetest.Run(t, enginetest.Harness{
			New:    func(t *testing.T) engine.Engine { return serve(t, path(t), false) },
			Virgin: func(t *testing.T) engine.Engine { return serve(t, path(t), true) },
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, enginetest.Harness{
			New:    func(t *testing.T) engine.Engine { return serve(t, pgtest.New(t).StoreURL(), false) },
			Virgin: func(t *testing.T) engine.Engine { return serve(t, pgtest.New(t).StoreURL(), true) },
		})
	})
}
