package remote_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
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
			CancelMayCommit: true,
			New:             func(t *testing.T) engine.Engine { return serve(t, "mem://", false) },
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "s.db") }
		enginetest.Run(t, enginetest.Harness{
			CancelMayCommit: true,
			New:             func(t *testing.T) engine.Engine { return serve(t, path(t), false) },
			Virgin:          func(t *testing.T) engine.Engine { return serve(t, path(t), true) },
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, enginetest.Harness{
			CancelMayCommit: true,
			New:             func(t *testing.T) engine.Engine { return serve(t, pgtest.New(t).StoreURL(), false) },
			Virgin:          func(t *testing.T) engine.Engine { return serve(t, pgtest.New(t).StoreURL(), true) },
		})
	})
}

// TestTLS opens the remote engine over https with a token, and refuses a
// wrong token at Open.
func TestTLS(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewTLSServer(server.New(st, server.Options{Token: "tls-token"}))
	t.Cleanup(srv.Close)
	if _, err := remote.Open(context.Background(), remote.Config{URL: srv.URL, Token: "wrong", Client: srv.Client()}); err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("Open with a wrong token: %v", err)
	}
	eng, err := remote.Open(context.Background(), remote.Config{URL: srv.URL, Token: "tls-token", Client: srv.Client()})
	if err != nil {
		t.Fatalf("Open over https: %v", err)
	}
	defer eng.Close()
	if current, latest, err := eng.SchemaVersion(context.Background()); err != nil || current != latest {
		t.Fatalf("SchemaVersion over https = %d, %d, %v", current, latest, err)
	}
	for _, bad := range []string{"ftp://x", "http://", "http://user:pw@host:1", "http://host:1/?q=1"} {
		if _, err := remote.Open(context.Background(), remote.Config{URL: bad}); !errors.Is(err, stead.ErrInvalidArgument) || strings.Contains(err.Error(), "pw") {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument without the URL's secrets", bad, err)
		}
	}
}
