package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/server"
)

func TestGC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	st, err := stead.Open(ctx, db, stead.WithPinTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Blobs.Put(ctx, strings.NewReader("collect me"))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	time.Sleep(2 * time.Millisecond)

	// Nothing declares liveness here: gc refuses, saying what to do.
	code, out, errOut := run(t, ctx, "--db", db, "gc", "--grace", "1ms")
	if code != 1 || !strings.Contains(errOut, "never declared liveness") || !strings.Contains(errOut, "--all-unreferenced") {
		t.Fatalf("gc of a store with no liveness = %d, %q, %q; want a refusal naming --all-unreferenced", code, out, errOut)
	}
	code, out, errOut = run(t, ctx, "--db", db, "gc", "--grace", "1ms", "--all-unreferenced")
	if code != 0 || !strings.Contains(out, "staged 1") {
		t.Fatalf("gc = %d, %q, %q; want the blob staged", code, out, errOut)
	}
	code, out, _ = run(t, ctx, "--db", db, "gc", "explain", key.String())
	if code != 0 || !strings.Contains(out, "unprotected") || !strings.Contains(out, "window") {
		t.Fatalf("gc explain = %d, %q; want it unprotected, in the window", code, out)
	}
	code, out, _ = run(t, ctx, "--db", db, "pins")
	if code != 0 || !strings.Contains(out, key.String()) {
		t.Fatalf("pins = %d, %q; want the staged key in the window", code, out)
	}
	time.Sleep(2 * time.Millisecond)
	code, out, _ = run(t, ctx, "--db", db, "gc", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || !strings.Contains(out, "deleted 1") {
		t.Fatalf("gc -dry-run = %d, %q; want 1 deletion reported", code, out)
	}
	code, out, _ = run(t, ctx, "--db", db, "gc", "--all-unreferenced")
	if code != 0 || !strings.Contains(out, "deleted 1 (10 bytes)") {
		t.Fatalf("gc = %d, %q; want the blob deleted", code, out)
	}
	code, out, _ = run(t, ctx, "--db", db, "gc", "explain", key.String())
	if code != exitNotFound || !strings.Contains(out, "not stored") {
		t.Fatalf("gc explain after deletion = %d, %q", code, out)
	}
	for _, bad := range [][]string{{"gc", "explain"}, {"gc", "explain", "sha256:nope"}, {"gc", "extra"}, {"pins", "extra"}} {
		if code, _, _ := run(t, ctx, append([]string{"--db", db}, bad...)...); code != 2 {
			t.Errorf("%v exited %d, want 2", bad, code)
		}
	}
}

// TestGCRemote runs stead gc, gc explain and pins against a server: the
// collector in the CLI drives the server's mechanics.
func TestGCRemote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	st, err := stead.Open(ctx, db, stead.WithPinTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := st.Blobs.Put(ctx, strings.NewReader("collect me"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	srv := httptest.NewServer(server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)

	code, out, errOut := run(t, ctx, "--db", srv.URL, "gc", "--grace", "1ms")
	if code != 1 || !strings.Contains(errOut, "never declared liveness") {
		t.Fatalf("gc over http of a store with no liveness = %d, %q, %q; want a refusal", code, out, errOut)
	}
	code, out, errOut = run(t, ctx, "--db", srv.URL, "gc", "--grace", "1ms", "--all-unreferenced")
	if code != 0 || !strings.Contains(out, "reaped 1 pins") || !strings.Contains(out, "staged 1") {
		t.Fatalf("gc over http = %d, %q, %q; want the pin reaped and the blob staged", code, out, errOut)
	}
	code, out, errOut = run(t, ctx, "--db", srv.URL, "gc", "explain", key.String())
	if code != 0 || !strings.Contains(out, "unprotected") || !strings.Contains(out, "window") {
		t.Fatalf("gc explain over http = %d, %q, %q", code, out, errOut)
	}
	code, out, _ = run(t, ctx, "--db", srv.URL, "pins")
	if code != 0 || !strings.Contains(out, key.String()) {
		t.Fatalf("pins over http = %d, %q; want the staged key in the window", code, out)
	}
	time.Sleep(2 * time.Millisecond)
	code, out, _ = run(t, ctx, "--db", srv.URL, "gc", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || !strings.Contains(out, "deleted 1") {
		t.Fatalf("gc --dry-run over http = %d, %q", code, out)
	}
	code, out, _ = run(t, ctx, "--db", srv.URL, "gc", "--all-unreferenced")
	if code != 0 || !strings.Contains(out, "deleted 1 (10 bytes)") {
		t.Fatalf("gc over http = %d, %q; want the blob deleted", code, out)
	}
	if has, err := st.Blobs.Has(ctx, key); err != nil || has {
		t.Fatalf("after gc over http: Has = %v, %v", has, err)
	}
	code, out, _ = run(t, ctx, "--db", srv.URL, "gc", "explain", key.String())
	if code != exitNotFound || !strings.Contains(out, "not stored") {
		t.Fatalf("gc explain after deletion = %d, %q", code, out)
	}
}
