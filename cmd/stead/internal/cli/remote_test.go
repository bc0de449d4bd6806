package cli

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/steadkit/stead/server"
)

// TestRemoteNoMigrate: commands against a stead server leave its schema
// to it; only stead migrate asks it to migrate.
func TestRemoteNoMigrate(t *testing.T) {
	t.Parallel()
	db := storeURL(t)
	seed(t, db)
	st := openStore(t, db)
	var migrates atomic.Int64
	h := server.New(st, server.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/schema/migrate" {
			migrates.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	for _, args := range [][]string{{"ls"}, {"get", alpha}, {"records", "ls", "workers"}, {"pins"}, {"gc", "explain", alpha}, {"doctor"}} {
		if code, _, stderr := runIn(t.Context(), append([]string{"--db", srv.URL}, args...)...); code != 0 {
			t.Errorf("stead %s on a server = exit %d, stderr %q", args, code, stderr)
		}
	}
	if n := migrates.Load(); n != 0 {
		t.Errorf("commands on a server asked it to migrate %d times, want none", n)
	}
	if code, _, stderr := runIn(t.Context(), "--db", srv.URL, "migrate"); code != 0 || migrates.Load() != 1 {
		t.Errorf("stead migrate on a server = exit %d (stderr %q), %d migrate requests; want exit 0 and one", code, stderr, migrates.Load())
	}
}
